"""cddp.distributed.fsdp._params — which parameters an FSDP unit (FullyShardedDataParallel)
or a fully_shard group owns: one walk both use.

Contract: collect(root, skip, claimed, descend, buffers=None) walks root's module tree (each
module once, shared submodules too) and returns [(param, [(module, name, fqn)])] in
named_parameters order, each shared parameter once with every place that holds it.
skip(name, p): leave the parameter out (ignored, or the unit's own flat parameter);
claimed(p): None, or a sentence saying another unit already owns p, raised as ValueError with
the parameter's name in front; descend(child): whether to walk into a submodule (not into
nested units or ignored modules); buffers, when a list, receives (module, name) of every
buffer met.
"""


def collect(root, skip, claimed, descend, buffers=None):
    params, index, seen = [], {}, set()

    def walk(m, prefix):
        if id(m) in seen:
            return
        seen.add(id(m))
        for name, p in m._parameters.items():
            if p is None or skip(name, p):
                continue
            fqn = prefix + name
            why = claimed(p)
            if why:
                raise ValueError(f"parameter {fqn!r} {why}")
            if id(p) in index:
                params[index[id(p)]][1].append((m, name, fqn))
            else:
                index[id(p)] = len(params)
                params.append((p, [(m, name, fqn)]))
        if buffers is not None:
            buffers.extend((m, name) for name, b in m._buffers.items() if b is not None)
        for cname, c in m._modules.items():
            if c is not None and descend(c):
                walk(c, prefix + cname + ".")

    walk(root, "")
    return params
