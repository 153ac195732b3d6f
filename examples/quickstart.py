"""Quick start: fit y = X w + b by gradient descent with cddp's tensors and autograd.

This is a plain torch script; only the import line says cddp (`import torch` ->
`import cddp as torch`). One process, CPU, a few hundred milliseconds:

    python examples/quickstart.py

It prints the loss falling and the learned parameters beside the true ones, and exits with
status 1 if the fit did not converge (so it doubles as a smoke test of the install).
"""
import sys

import cddp as torch

torch.manual_seed(0)

# data: 256 samples, 3 features, a known linear rule plus a little noise
true_w = torch.tensor([[2.0], [-3.4], [1.5]])      # (3, 1)
true_b = 4.2
X = torch.randn(256, 3)                            # (N, 3)
y = X @ true_w + true_b + 0.01 * torch.randn(256, 1)   # (N, 1)

# parameters: leaves that autograd fills .grad for
w = torch.zeros(3, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)

lr = 0.1
for step in range(101):
    pred = X @ w + b                               # (N, 1)
    loss = ((pred - y) ** 2).mean()                # mean squared error, a 0-dim tensor
    loss.backward()                                # fills w.grad and b.grad
    with torch.no_grad():                          # the update itself is not differentiated
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
    if step == 0:
        first = loss.item()
    if step % 10 == 0:
        print(f"step {step:3d}  loss {loss.item():.6f}")

print("learned w", [round(v, 3) for v in w.detach().numpy().ravel().tolist()], "b", round(b.item(), 3))
print("true    w", [round(v, 3) for v in true_w.numpy().ravel().tolist()], "b", true_b)
if not loss.item() < first * 1e-3:
    print("the loss did not fall: something is wrong with this install", file=sys.stderr)
    sys.exit(1)
