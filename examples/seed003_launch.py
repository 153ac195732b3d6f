# From seed 003 (多GPU训练), "DDP完整示例代码", launched as in the seed:
#   python -m torch.distributed.launch --nproc_per_node=2 --nnodes=1 seed003_launch.py
# The seed imports Net and train_dataset from its own modules; small stand-ins are defined here,
# the TensorBoard writer is replaced by a print, and one epoch runs (marked "stand-in").
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
import argparse
import random
import numpy as np
import cddp as torch
import cddp.optim as optim
import cddp.nn as nn
from cddp.utils.data.distributed import DistributedSampler


class Net(nn.Module):  # stand-in for "from model import Net"
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


g = torch.Generator().manual_seed(1234)  # stand-in for "from data import train_dataset"
train_dataset = torch.utils.data.TensorDataset(torch.randn(512, 16, generator=g),
                                               torch.randint(0, 4, (512,), generator=g))

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()

torch.cuda.set_device(args.local_rank)
device = torch.device('cuda', args.local_rank)
torch.distributed.init_process_group(backend='nccl')

seed = 42
random.seed(seed)
np.random.seed(seed)
torch.manual_seed(seed)
torch.cuda.manual_seed_all(seed)

batch_size = 64

model = Net()
model.to(device)
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(model.parameters(), lr=0.1)

train_sampler = DistributedSampler(train_dataset)
train_loader = torch.utils.data.DataLoader(train_dataset, sampler=train_sampler, batch_size=batch_size)

model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank], output_device=args.local_rank, find_unused_parameters=True)

for i, (inputs, labels) in enumerate(train_loader):
    inputs = inputs.to(device)
    labels = labels.to(device)
    outputs = model(inputs)
    loss = criterion(outputs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.local_rank == 0 and i % 5 == 0:
        print('loss', i, loss.item())  # stand-in for tb_writer.add_scalar
