"""torch.utils.model_zoo: the old name of cddp.hub.load_state_dict_from_url (older model code
calls model_zoo.load_url)."""
from ..hub import load_state_dict_from_url as load_url  # noqa: F401
