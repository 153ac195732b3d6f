"""cddp.distributed.checkpoint.stateful — torch's Stateful protocol: an object with state_dict()
and load_state_dict(). save() calls state_dict() on each top-level Stateful value; load()
calls state_dict(), loads into it, then load_state_dict(). Modules and optimizers qualify."""
from typing import Any, Dict, Protocol, runtime_checkable

__all__ = ["Stateful", "StatefulT"]


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> Dict[str, Any]:
        ...

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        ...


StatefulT = Stateful
