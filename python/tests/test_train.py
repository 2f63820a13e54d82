"""Training from Python: luminal.gradients against torch.autograd, the optimizers against
torch.optim on the same model and data, loss scaling, checkpoints and errors."""
import numpy as np
import pytest

import luminal

torch = pytest.importorskip("torch")


def mlp_graph(w1, w2, x, y):
    """loss = mean((tanh(x w1) w2 - y)^2) in a new graph; returns the graph, the weight
    tensors and the loss."""
    g = luminal.Graph()
    tw1 = g.tensor(w1.shape, name="w1")
    tw2 = g.tensor(w2.shape, name="w2")
    tx = g.tensor(x.shape, name="x")
    ty = g.tensor(y.shape, name="y")
    for t, v in ((tw1, w1), (tw2, w2), (tx, x), (ty, y)):
        t.set(v)
    err = tx.matmul(tw1).tanh().matmul(tw2) - ty
    return g, (tw1, tw2), (err * err).mean(axis=(0, 1))


def data(seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(4, 8) * 0.5, f(8, 3) * 0.5, f(16, 4), f(16, 3)


def torch_loss(w1, w2, x, y):
    return ((torch.tanh(torch.tensor(x) @ w1) @ w2 - torch.tensor(y)) ** 2).mean()


def test_gradients_match_torch_autograd():
    w1, w2, x, y = data()
    g, (tw1, tw2), loss = mlp_graph(w1, w2, x, y)
    grads = [t.retrieve() for t in luminal.gradients(loss, [tw1, tw2])]
    g.compile(luminal.cpu())
    g.execute()
    a, b = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    torch_loss(a, b, x, y).backward()
    np.testing.assert_allclose(grads[0].numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_five_steps_match_torch_optim(kind):
    w1, w2, x, y = data(1)
    g, weights, loss = mlp_graph(w1, w2, x, y)
    grads = luminal.gradients(loss, list(weights))
    if kind == "sgd":
        opt = luminal.sgd(list(weights), grads, lr=0.05, momentum=0.9, nesterov=True)
    else:
        opt = luminal.adamw(list(weights), grads, lr=luminal.warmup_cosine(0.02, 2, 5),
                            weight_decay=0.1)
    loss.retrieve()
    g.compile(luminal.cpu())
    a, b = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    if kind == "sgd":
        ref = torch.optim.SGD([a, b], lr=0.05, momentum=0.9, nesterov=True)
    else:
        ref = torch.optim.AdamW([a, b], lr=0.02, weight_decay=0.1)
    schedule = luminal.warmup_cosine(0.02, 2, 5)
    for step in range(5):
        g.execute()
        opt.advance()
        if kind == "adamw":
            for group in ref.param_groups:
                group["lr"] = schedule(step)
        ref.zero_grad()
        torch_loss(a, b, x, y).backward()
        ref.step()
    assert opt.steps == 5
    state = dict(opt.state)
    np.testing.assert_allclose(state["w1"].numpy(), a.detach().numpy(), rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(state["w2"].numpy(), b.detach().numpy(), rtol=2e-4, atol=2e-5)


def test_a_schedule_may_be_any_callable():
    w1, w2, x, y = data(2)
    g, weights, loss = mlp_graph(w1, w2, x, y)
    opt = luminal.sgd(list(weights), luminal.gradients(loss, list(weights)),
                      lr=lambda step: 0.1 / (step + 1))
    assert opt.learning_rate == pytest.approx(0.1)
    g.compile(luminal.reference())
    g.execute()
    opt.advance()
    assert opt.learning_rate == pytest.approx(0.05)


def test_loss_scale_skips_an_overflowing_step():
    g = luminal.Graph()
    w = g.tensor((3,), name="w")
    w.set(np.array([1, 2, 3], np.float32))
    loss = w.cast(luminal.float16).cast(luminal.float32).sum(axis=0)
    scaler = luminal.LossScale(g, initial=65536)
    grads = scaler.gradients(loss, [w])
    opt = luminal.sgd([w], grads, lr=0.5, apply_if=scaler.finite)
    g.compile(luminal.reference())
    g.execute()
    opt.advance(scaler.update())
    assert scaler.scale == 32768 and opt.steps == 0
    g.execute()
    opt.advance(scaler.update())
    assert opt.steps == 1
    np.testing.assert_array_equal(dict(opt.state)["w"].numpy(), [0.5, 1.5, 2.5])


def test_checkpoint_round_trip(tmp_path):
    w1, w2, x, y = data(3)
    path = str(tmp_path / "run.safetensors")
    g, weights, loss = mlp_graph(w1, w2, x, y)
    opt = luminal.adam(list(weights), luminal.gradients(loss, list(weights)), lr=0.01)
    g.compile(luminal.cpu())
    for _ in range(2):
        g.execute()
        opt.advance()
    luminal.save_checkpoint(path, opt)
    g2, weights2, loss2 = mlp_graph(w1 * 0, w2 * 0, x, y)
    opt2 = luminal.adam(list(weights2), luminal.gradients(loss2, list(weights2)), lr=0.01)
    luminal.load_checkpoint(path, opt2)
    assert opt2.runs == 2
    for (n1, t1), (n2, t2) in zip(opt.state, opt2.state):
        assert n1 == n2
        np.testing.assert_array_equal(t1.numpy(), t2.numpy())


def test_errors_are_luminal_errors():
    g = luminal.Graph()
    w = g.tensor((2,), name="w")
    with pytest.raises(luminal.Error, match="seed gradient"):
        luminal.gradients(w * 2.0, [w])
    with pytest.raises(luminal.Error, match="before gradients"):
        luminal.LossScale(g).finite
    with pytest.raises(luminal.Error, match="1 parameters but 2"):
        luminal.sgd([w], luminal.gradients((w * w).sum(axis=0), [w, w]), lr=0.1)
