"""torch.jit.annotations: the typing names TorchScript code imports from here (timm's
densenet: `from torch.jit.annotations import List`). cddp has no TorchScript, so they are
typing's own; BroadcastingList1/2/3 are List, as in torch's eager mode."""
from typing import Any, Dict, List, Optional, Tuple, Union  # noqa: F401

BroadcastingList1 = BroadcastingList2 = BroadcastingList3 = List

__all__ = ["Any", "Dict", "List", "Optional", "Tuple", "Union", "BroadcastingList1",
           "BroadcastingList2", "BroadcastingList3"]
