"""cddp.distributed._composable — torch's path of the composable APIs; only fsdp (FSDP2's
older import path, torch.distributed._composable.fsdp) is here."""
