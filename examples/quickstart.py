"""Train a tiny regression model eagerly with kiln and print the loss per step."""

import kiln as torch

torch.manual_seed(0)
x = torch.randn(256, 8)
true_w = torch.randn(8, 1)
y = x @ true_w + 0.1 * torch.randn(256, 1)

w = torch.zeros(8, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1
for step in range(20):
    pred = x @ w + b
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad = None
        b.grad = None
    print(f"step {step:2d}  loss {loss.item():.4f}")
