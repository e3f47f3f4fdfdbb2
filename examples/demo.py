"""Train a small CNN on scikit-learn's bundled digits (8x8 images, 1,797 samples) with
tenferro-nn: a compiled train step (forward, backward and Adam update in one graph), a
shuffling data loader, a progress bar (on a terminal; plain lines when the output goes to a
file or a pipe), the energy of each epoch (measured where a meter can read, else estimated,
and labelled), then save the model, load it into a fresh one and check that it gives the same
test accuracy.

Run with `make demo`. Options: `--device torch:cpu`, `--epochs N`, `--out PATH`; the
environment variable `TENFERRO_THREADS` sets the threads (default: the CPUs it may use).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import tenferro_nn as nn
from tenferro_ad import value_and_grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, default_device, default_runtime, random
from tenferro_runtime.energy import measure
from tenferro_runtime.energy.report import plot, table


def digits(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Images scaled to [0, 1] as (N, 1, 8, 8) float32, labels int64; a stratified 80/20 split."""
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    return tuple(train_test_split(x, data.target.astype(np.int64), test_size=0.2, random_state=seed,
                                  stratify=data.target))


def cnn(key) -> nn.Module:
    k = random.split(key, 4)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, key=k[0]), nn.ReLU(), nn.MaxPool2d(2),    # 32 x 4 x 4
        nn.Conv2d(32, 64, 3, padding=1, key=k[1]), nn.ReLU(), nn.MaxPool2d(2),   # 64 x 2 x 2
        nn.Flatten(),
        nn.Linear(256, 128, key=k[2]), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, 10, key=k[3]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="numpy:cpu")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default="build/demo/digits_cnn.safetensors")
    args = ap.parse_args()
    t_start = time.perf_counter()
    with default_device(args.device):
        run(args)
    print(f"\ntotal wall time: {time.perf_counter() - t_start:.1f} s")


def run(args: argparse.Namespace) -> None:
    x_train, x_test, y_train, y_test = digits()
    rt = default_runtime()
    print(f"digits: {len(x_train)} training and {len(x_test)} test images on {args.device} "
          f"(threads {rt.threads}, from {rt.threads_source}; set TENFERRO_THREADS to change it)")
    key = random.key(0)
    k_init, k_data, k_drop = random.split(key, 3)
    model = cnn(k_init)
    n_params = sum(p.size for p in model.parameters())
    print(f"model: {n_params:,} parameters\n{model}")

    opt = nn.Adam(lr=nn.cosine_annealing(3e-3, t_max=args.epochs * (len(x_train) // args.batch_size)))
    state = opt.init(model)
    loader = nn.DataLoader(nn.ArrayDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True,
                           key=k_data, drop_last=True, prefetch=2)

    def train_step(model, state, x, y, key):
        def loss_fn(m):
            logits = m(x, key=key)
            return nn.cross_entropy(logits, y), logits

        (loss, logits), grads = value_and_grad(loss_fn, has_aux=True)(model)
        model, state = opt.update(model, grads, state)
        return model, state, loss, xp.sum(xp.argmax(logits, axis=1) == y)

    step = compile(train_step, donate_argnums=(0, 1))
    predict = compile(lambda m, x: xp.argmax(m(x), axis=1))

    def accuracy(m: nn.Module) -> float:
        return float(np.mean(np.asarray(predict(m, xp.asarray(x_test))) == y_test))

    # A redrawn bar (carriage returns) only where both streams are a terminal: into a file or a
    # pipe it would interleave with the epoch lines, so there each epoch is one plain line.
    interactive = sys.stdout.isatty() and sys.stderr.isatty()
    if not interactive:
        print(f"training: {args.epochs} epochs, one line each (no progress bar: output is not a terminal)",
              file=sys.stderr, flush=True)
    bar = tqdm(range(args.epochs), desc="training", unit="epoch", disable=not interactive)
    epochs = []
    for epoch in bar:
        model.train()
        losses, correct, seen = [], 0, 0
        with measure(f"epoch {epoch + 1}", kind="epoch") as energy:
            for i, (x, y) in enumerate(loader):
                model, state, loss, hits = step(model, state, x, y, random.fold_in(k_drop, epoch * 1000 + i))
                losses.append(float(loss))
                correct += int(hits)
                seen += y.shape[0]
        epochs.append(energy)
        model.eval()
        test_acc = accuracy(model)
        bar.set_postfix(loss=f"{np.mean(losses):.4f}", train_acc=f"{correct / seen:.3f}",
                        test_acc=f"{test_acc:.3f}")
        tqdm.write(f"epoch {epoch + 1:>2}: loss {np.mean(losses):.4f}  train accuracy {correct / seen:.3f}  "
                   f"test accuracy {test_acc:.3f}  energy {energy.joules:.3g} J ({energy.sources})")
    print(f"compiled train step: {step.cache_info()}")
    print(f"\nenergy per epoch\n{table(epochs)}")
    figure = plot(epochs, Path(args.out).with_name("energy.png"), title="digits CNN training energy")
    print(f"energy plot: {figure}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    nn.save_model(model, out, metadata={"dataset": "sklearn digits", "test_accuracy": f"{test_acc:.4f}"})
    fresh = cnn(random.key(123)).eval()
    nn.load_model(fresh, out)
    reloaded = accuracy(fresh)
    print(f"saved to {out} ({out.stat().st_size / 1024:.0f} KiB); reloaded model's test accuracy: "
          f"{reloaded:.4f} (before saving: {test_acc:.4f}, same: {reloaded == test_acc})")


if __name__ == "__main__":
    main()
