# From seed 001 (单机多卡), "单机多卡训练示例" train.py and section 4 "多GPU训练单GPU测试".
# torchvision's resnet18 and ImageFolder are replaced by a small MLP and a random labelled set,
# and utils.progress_bar by a print (marked "stand-in"); the rest is the seed's code. Run:
#   python seed001_train.py --max_epochs 2 --outf OUT_DIR
import cddp as torch
from cddp import ne, nn
from cddp import optim
from cddp.utils import data
import cddp.distributed as dist
import os
import argparse
from collections import OrderedDict

print("=> set useful GPU sources...")
os.environ["CUDA_VISIBLE_DEVICES"] = "1, 2, 3, 4, 5"
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def parser():
    parser = argparse.ArgumentParser(description='PyTorch CIFAR10 Training')
    parser.add_argument('--outf', default='./output', help='folder to output model checkpoints')
    parser.add_argument('-j', '--workers', default=4, type=int, metavar='N')
    parser.add_argument('--max_epochs', default=90, type=int, metavar='N')
    parser.add_argument('--start_epoch', default=0, type=int, metavar='N')
    parser.add_argument('-b', '--batch-size', default=512, type=int, metavar='N')
    parser.add_argument('--lr', '--learning-rate', default=0.1, type=float, metavar='LR')
    parser.add_argument('--momentum', default=0.9, type=float, metavar='M')
    parser.add_argument('--weight-decay', '--wd', default=1e-4, type=float, metavar='W')
    parser.add_argument('--world_size', default=1, type=int)
    parser.add_argument('--local_rank', default=0, type=int)
    parser.add_argument('--dist_url', default='tcp://localhost:23456', type=str)
    parser.add_argument('--dist_backend', default='nccl', type=str)
    parser.add_argument('--multiprocessing_distributed', action='store_true', default=True)
    args = parser.parse_args()
    return args


args = parser()


def distributed_is_initialized():
    if dist.is_available():
        if dist.is_initialized():
            return True
    return False


if args.multiprocessing_distributed:
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.local_rank)

print("==> prepare data..")
g = torch.Generator().manual_seed(0)  # stand-in for datasets.ImageFolder
train_dataset = data.TensorDataset(torch.randn(2048, 48, generator=g), torch.randint(0, 6, (2048,), generator=g))
labels = 6

sampler = None
if distributed_is_initialized():
    sampler = data.DistributedSampler(train_dataset)
train_loader = data.DataLoader(train_dataset, batch_size=args.batch_size,
                               shuffle=(sampler is None), sampler=sampler)

print("==> Building model ..")
net = nn.Sequential(nn.Linear(48, 128), nn.ReLU(), nn.Linear(128, labels))  # stand-in for resnet18
if distributed_is_initialized():
    print("[Info] distributed training has been initialized")
    net.to(device)
    net = nn.parallel.DistributedDataParallel(net)
else:
    net = nn.DataParallel(net)
    net.to(device)

print("==> loss function and optimizer...")
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=5e-4)
scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)

print("==> Performing training ...")


def train(args):
    net.train()
    os.makedirs(args.outf, exist_ok=True)
    for epoch in range(args.start_epoch, args.max_epochs):
        print("==> Epoch: %d" % (epoch))
        train_loss = 0
        correct_num = 0
        total_num = 0
        for iter, (inputs, targets) in enumerate(train_loader):
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
            _, predicted = outputs.max(1)
            total_num += targets.size(0)
            correct_num += predicted.eq(targets).sum().item()
            print('Loss: %.3f | Acc: %.3f%% (%d/%d)'  # stand-in for progress_bar
                  % (train_loss / (iter + 1), 100. * correct_num / total_num, correct_num, total_num))
        scheduler.step()
        torch.save(net.state_dict(), os.path.join(args.outf, "checkpoint.pth"))


def newCheckpoint(state_dict):
    new_state_dict = OrderedDict()
    for key in state_dict.keys():
        new_key = key[key.find(".") + 1:]
        new_state_dict[new_key] = state_dict[key]
    return new_state_dict


if __name__ == "__main__":
    train(args)
    # section 4: weights trained wrapped ("module." keys) are tested in a bare single-device model
    test_net = nn.Sequential(nn.Linear(48, 128), nn.ReLU(), nn.Linear(128, labels))
    test_net.load_state_dict(newCheckpoint(torch.load(os.path.join(args.outf, "checkpoint.pth"))))
    test_net.eval()
    with torch.no_grad():
        x, y = train_dataset[0:256]
        acc = test_net(x).argmax(1).eq(y).float().mean().item()
    print("single-device accuracy %.3f" % acc)
