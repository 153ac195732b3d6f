"""torch.nn.parallel.replicate: the network once per device. All of cddp's devices are this
process's CPU, so every replica is the network itself: parameters are shared and their
gradients add up over the replicas (what torch's broadcast replicas give back through their
broadcast's backward). One difference: buffers (BatchNorm's running statistics) are updated
by every replica here, where torch keeps only the first device's updates."""
__all__ = ["replicate"]


def replicate(network, devices, detach=False):
    return [network for _ in devices]
