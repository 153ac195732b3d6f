# From seed 002, section 1 "数据并行DP(nn.DataParallel)": single process, the model wrapped in
# nn.DataParallel when more than one GPU is seen. The seed's target tensor (64, 5) does not match
# the model's (30, 2) output; a target of the output's shape stands in, and the seed's undefined
# average_gradients(model) is left out (DataParallel reduces gradients itself).
import cddp as torch
import cddp.nn as nn
import cddp.optim as optim
from cddp.utils.data import Dataset, DataLoader


class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return self.len


class Model(nn.Module):
    def __init__(self, input_size, output_size):
        super(Model, self).__init__()
        self.fc = nn.Linear(input_size, output_size)

    def forward(self, input):
        output = self.fc(input)
        print("\tIn Model: input size", input.size(),
              "output size", output.size())
        return output


input_size = 5
output_size = 2
batch_size = 30
data_size = 100

rand_loader = DataLoader(dataset=RandomDataset(input_size, data_size),
                         batch_size=batch_size,
                         shuffle=True)

model = Model(input_size, output_size)
if torch.cuda.device_count() > 1:
    device_ids = [0, 1]
    model = nn.DataParallel(model, device_ids)

device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')
model.to(device)

optimizer = optim.SGD(model.parameters(), lr=0.01)
criterion = nn.MSELoss()

for data in rand_loader:
    input = data.to(device)
    output = model(input)
    print("Outside: input size", input.size(),
          "output_size", output.size())
    target = torch.randn(output.size()).to(device)  # stand-in target
    optimizer.zero_grad()
    loss = criterion(output, target)
    loss.backward()
    optimizer.step()
