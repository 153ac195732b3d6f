# From seed 001 (单机多卡), "单机多卡训练示例" train.py and section 4 "多GPU训练单GPU测试", with the
# model the seed trains: torchvision's resnet18, written out below with torchvision's layer names
# (torchvision is not a dependency). ImageFolder is replaced by random 3x32x32 images and
# utils.progress_bar by a print (marked "stand-in"); the rest is the seed's code. Run:
#   python seed001_resnet.py --max_epochs 1 -b 64 --outf OUT_DIR
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


class BasicBlock(nn.Module):  # stand-in for torchvision.models.resnet (same layout and key names)
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0], 1)
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes):
    return ResNet((2, 2, 2, 2), num_classes)


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
train_dataset = data.TensorDataset(torch.randn(512, 3, 32, 32, generator=g), torch.randint(0, 6, (512,), generator=g))
labels = 6

sampler = None
if distributed_is_initialized():
    sampler = data.DistributedSampler(train_dataset)
train_loader = data.DataLoader(train_dataset, batch_size=args.batch_size,
                               shuffle=(sampler is None), sampler=sampler)

print("==> Building model ..")
net = resnet18(num_classes=labels)
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
    test_net = resnet18(num_classes=labels)
    test_net.load_state_dict(newCheckpoint(torch.load(os.path.join(args.outf, "checkpoint.pth"))))
    test_net.eval()
    with torch.no_grad():
        x, y = train_dataset[0:256]
        acc = test_net(x).argmax(1).eq(y).float().mean().item()
    print("single-device accuracy %.3f" % acc)
