# From seed 000 (Pytorch分布式数据并行), which follows insightface's arcface_torch train.py.
# Its backbone, margin loss, PartialFC, config, DALI, wandb and ONNX export are not part of the
# seed's lesson; small stand-ins keep every DDP pattern the seed teaches:
#   env-or-tcp fallback init, DistributedSampler(num_replicas, rank, shuffle, seed), set_epoch,
#   DDP(broadcast_buffers=False, device_ids, bucket_cap_mb=16, find_unused_parameters=True),
#   _set_static_graph(), clip_grad_norm_, all_gather / all_reduce(SUM), per-rank resumable
#   checkpoints, rank-0 model save, barrier, destroy_process_group.
# Run either way the seed shows:
#   python -m torch.distributed.launch --nproc_per_node=2 seed000_insightface.py OUT_DIR [--epochs N] [--resume]
#   python seed000_insightface.py OUT_DIR            (falls back to a world of one)
import argparse
import logging
import os

import cddp as torch
from cddp import distributed
from cddp.utils.data import DataLoader, TensorDataset
from cddp.utils.data.distributed import DistributedSampler

try:
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    distributed.init_process_group("nccl")
except KeyError:
    rank = 0
    local_rank = 0
    world_size = 1
    distributed.init_process_group(
        backend="nccl",
        init_method="tcp://127.0.0.1:12584",
        rank=rank,
        world_size=world_size,
    )


def get_model(num_features):  # stand-in backbone
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, num_features))


def main(args):
    torch.manual_seed(2048)
    torch.cuda.set_device(local_rank)
    os.makedirs(args.output, exist_ok=True)
    logging.basicConfig(level=logging.INFO)

    num_classes, embedding_size, batch_size, num_epoch, seed = 10, 16, 32, args.epochs, 2048
    g = torch.Generator().manual_seed(7)
    train_set = TensorDataset(torch.randn(1024, 32, generator=g),
                              torch.randint(0, num_classes, (1024,), generator=g))
    train_sampler = DistributedSampler(
        train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    train_loader = DataLoader(
        dataset=train_set, pin_memory=True, batch_size=batch_size,
        num_workers=2, sampler=train_sampler)

    backbone = get_model(embedding_size).cuda()
    backbone = torch.nn.parallel.DistributedDataParallel(
        module=backbone, broadcast_buffers=False, device_ids=[local_rank], bucket_cap_mb=16,
        find_unused_parameters=True)
    backbone.train()
    backbone._set_static_graph()

    head = torch.nn.Linear(embedding_size, num_classes).cuda()  # stand-in for PartialFC
    head = torch.nn.parallel.DistributedDataParallel(head, device_ids=[local_rank])
    criterion = torch.nn.CrossEntropyLoss()

    opt = torch.optim.SGD(
        params=[{"params": backbone.parameters()}, {"params": head.parameters()}],
        lr=0.1, momentum=0.9, weight_decay=5e-4)
    total_step = len(train_loader) * num_epoch
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: (1 - step / total_step) ** 2)  # stand-in for PolyScheduler

    start_epoch = 0
    global_step = 0
    if args.resume:
        dict_checkpoint = torch.load(os.path.join(args.output, f"checkpoint_gpu_{rank}.pt"))
        start_epoch = dict_checkpoint["epoch"]
        global_step = dict_checkpoint["global_step"]
        backbone.module.load_state_dict(dict_checkpoint["state_dict_backbone"])
        head.module.load_state_dict(dict_checkpoint["state_dict_softmax_fc"])
        opt.load_state_dict(dict_checkpoint["state_optimizer"])
        lr_scheduler.load_state_dict(dict_checkpoint["state_lr_scheduler"])
        del dict_checkpoint

    for epoch in range(start_epoch, num_epoch):
        if isinstance(train_loader, DataLoader):
            train_loader.sampler.set_epoch(epoch)
        for _, (img, local_labels) in enumerate(train_loader):
            global_step += 1
            img, local_labels = img.cuda(), local_labels.cuda()
            local_embeddings = backbone(img)
            loss = criterion(head(local_embeddings), local_labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(backbone.parameters(), 5)
            opt.step()
            opt.zero_grad()
            lr_scheduler.step()

        with torch.no_grad():  # the seed's step 5: gather embeddings and labels, sum the loss
            _gather_embeddings = [torch.zeros_like(local_embeddings) for _ in range(world_size)]
            _gather_labels = [torch.zeros_like(local_labels) for _ in range(world_size)]
            distributed.all_gather(_gather_embeddings, local_embeddings.detach())
            distributed.all_gather(_gather_labels, local_labels)
            summed = loss.detach().clone()
            distributed.all_reduce(summed, distributed.ReduceOp.SUM)
            if rank == 0:
                logging.info("epoch %d step %d mean loss %.6f gathered %d labels", epoch,
                             global_step, summed.item() / world_size,
                             sum(t.numel() for t in _gather_labels))

        checkpoint = {
            "epoch": epoch + 1,
            "global_step": global_step,
            "state_dict_backbone": backbone.module.state_dict(),
            "state_dict_softmax_fc": head.module.state_dict(),
            "state_optimizer": opt.state_dict(),
            "state_lr_scheduler": lr_scheduler.state_dict()
        }
        torch.save(checkpoint, os.path.join(args.output, f"checkpoint_gpu_{rank}.pt"))

        if rank == 0:
            path_module = os.path.join(args.output, "model.pt")
            torch.save(backbone.module.state_dict(), path_module)

    distributed.barrier()
    if rank == 0:
        path_module = os.path.join(args.output, "model.pt")
        torch.save(backbone.module.state_dict(), path_module)
        state = torch.load(path_module, map_location="cpu")
        print("saved", sorted(state.keys()))

    distributed.destroy_process_group()


if __name__ == "__main__":
    torch.backends.cudnn.benchmark = True
    parser = argparse.ArgumentParser(description="Distributed Arcface Training in Pytorch")
    parser.add_argument("output", type=str, help="output folder")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)  # stand-in for cfg.num_epoch
    parser.add_argument("--local_rank", type=int, default=0)  # stand-in: the legacy launcher passes it
    main(parser.parse_args())
