"""Parameter averaging across a process group (torch.distributed.algorithms.model_averaging.
utils): the parameters flattened into one buffer, divided by the group size, all_reduced,
copied back. Differs from torch: the averages are copied into the parameters (torch rebinds
p.data to views of the flat buffer), so each parameter keeps its own storage."""
from .... import _C

__all__ = ["average_parameters", "get_params_to_average",
           "average_parameters_or_parameter_groups"]


def _dist():
    from .... import distributed
    return distributed


def average_parameters(params, process_group):
    dist = _dist()
    group = process_group if process_group is not None else dist.group.WORLD
    if group is dist.GroupMember.NON_GROUP_MEMBER:
        return
    params = list(params)
    if not params:
        return
    flat = _C.cat([p.detach().reshape(-1) for p in params])
    flat.div_(dist.get_world_size(group))
    dist.all_reduce(flat, group=group)
    at = 0
    for p in params:
        p.detach().copy_(flat[at:at + p.numel()].view(tuple(p.shape)))   # p's own storage
        at += p.numel()


def get_params_to_average(params):
    """The parameters (or those of parameter groups) that have a gradient."""
    out = []
    for item in params:
        if isinstance(item, _C.Tensor):
            if item.grad is not None:
                out.append(item)
        elif isinstance(item, dict):
            out += [p for p in item["params"] if p.grad is not None]
        else:
            raise NotImplementedError(f"Parameter input of type {type(item)} is not supported")
    return out


def average_parameters_or_parameter_groups(params, process_group):
    average_parameters(iter(get_params_to_average(params)), process_group)
