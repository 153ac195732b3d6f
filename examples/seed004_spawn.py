# From seed 004 (使用DistributedDataParallel进行PyTorch模型的分布式训练).
# The seed leaves the dataset as "train_dataset = ..."; a small labelled set stands in,
# and rank 0 prints the last loss (both marked "stand-in"). Everything else is the seed's code.
import cddp as torch
import cddp.nn as nn
import cddp.optim as optim
import cddp.distributed as dist
import cddp.multiprocessing as mp
from cddp.nn.parallel import DistributedDataParallel as DDP


class MyModel(nn.Module):
    def __init__(self):
        super(MyModel, self).__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        x = self.fc1(x)
        x = self.fc2(x)
        return x


def train(rank, world_size):
    dist.init_process_group(backend='nccl', init_method='tcp://127.0.0.1:23456', world_size=world_size, rank=rank)

    model = MyModel()
    model = DDP(model.to(rank))
    optimizer = optim.SGD(model.parameters(), lr=0.001)

    g = torch.Generator().manual_seed(0)  # stand-in dataset
    train_dataset = torch.utils.data.TensorDataset(
        torch.randn(256, 10, generator=g), torch.randint(0, 2, (256,), generator=g))
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=32, sampler=train_sampler)

    for epoch in range(10):
        for data, target in train_loader:
            optimizer.zero_grad()
            output = model(data.to(rank))
            loss = nn.CrossEntropyLoss()(output, target.to(rank))
            loss.backward()
            optimizer.step()

    if rank == 0:  # stand-in
        print(f"final loss {loss.item():.6f}")
    dist.destroy_process_group()


if __name__ == '__main__':
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
