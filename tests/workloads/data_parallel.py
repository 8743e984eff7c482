"""torchvision's ImageNet example (examples/imagenet/main.py) as it trains on one node with several
GPUs and no --gpu: the model wrapped in torch.nn.DataParallel over every visible GPU, the batch
(256 by default, the example's) moved to cuda:0 and scattered by DataParallel, CrossEntropyLoss,
SGD (lr 0.1, momentum 0.9, weight decay 1e-4), loss.item() and the top-1/top-5 accuracy every step.
Dummy data (the example's --dummy), served by DataLoader workers with pinned memory. No tuimon
import: run it under `tuimon run`.

    python data_parallel.py [--batch 256] [--workers 4] [--seconds 30] [--warmup 15] [--step-log FILE]

The model is torchvision's ResNet-50 where torchvision imports, else a ResNet-50 built here from
plain torch (the same bottleneck blocks, [3, 4, 6, 3]). The loop's own timers: each step's time, and
DataParallel's four parts timed by a subclass that overrides them and calls them (replicate,
scatter, parallel_apply, gather: what tuimon's probe times by wrapping DataParallel's own methods).
--step-log: a line per step after the warm-up: its end (CLOCK_MONOTONIC s), its time and the four
parts (ms). The last line of its output: RESULT {json} with the loop's throughput and part shares."""

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import torchvision
except ImportError:  # (a plain torch install)
    torchvision = None

PARTS = ("replicate", "scatter", "parallel_apply", "gather")


class TimedDataParallel(nn.DataParallel):
    """nn.DataParallel whose four parts the loop times itself (perf_counter around each call)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.times = dict.fromkeys(PARTS, 0.0)

    def _timed(self, name, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.times[name] += time.perf_counter() - t0

    def replicate(self, module, device_ids):
        return self._timed("replicate", super().replicate, module, device_ids)

    def scatter(self, inputs, kwargs, device_ids):
        return self._timed("scatter", super().scatter, inputs, kwargs, device_ids)

    def parallel_apply(self, replicas, inputs, kwargs):
        return self._timed("parallel_apply", super().parallel_apply, replicas, inputs, kwargs)

    def gather(self, outputs, output_device):
        return self._timed("gather", super().gather, outputs, output_device)


class Dummy(Dataset):
    """The example's --dummy data, served fast: 64 random images cycled (the loader's cost is the
    batch's collation and pinning, as with decoded images)."""

    def __init__(self, n=1_281_167):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(64, 3, 224, 224, generator=g)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.images[i % 64], i % 1000


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.down is None else self.down(x)))


def resnet50_plain(num_classes=1000):
    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                   nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def accuracy(output, target, topk=(1,)):
    """The example's: the top-k accuracy, as tensors on the GPU."""
    with torch.no_grad():
        maxk, batch = max(topk), target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch) for k in topk]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--step-log")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the loop (DataParallel then calls the module)")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    net = torchvision.models.resnet50() if torchvision is not None else resnet50_plain()
    device = torch.device(a.device)
    model = TimedDataParallel(net).to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    loader = DataLoader(Dummy(), batch_size=a.batch, shuffle=True, num_workers=a.workers,
                        pin_memory=device.type == "cuda")
    log = open(a.step_log, "w", buffering=1 << 16) if a.step_log else None
    print(f"training: {'torchvision resnet50' if torchvision is not None else 'plain-torch resnet50'}, "
          f"DataParallel on {len(model.device_ids)} GPUs, batch {a.batch}, {a.workers} workers", flush=True)
    model.train()
    end_at = None
    top1 = top5 = 0.0  # (the example's AverageMeters: sums of tensors on the GPU, no sync)
    steps = images = 0
    step_s = 0.0
    parts = dict.fromkeys(PARTS, 0.0)
    end = time.perf_counter()
    for i, (x, target) in enumerate(loader):
        x = x.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        before = dict(model.times)
        output = model(x)
        loss = criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        top1, top5 = top1 + acc1[0] * x.size(0), top5 + acc5[0] * x.size(0)
        loss.item()  # (the example's losses.update(loss.item(), ...))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        if i == a.warmup:
            print("warm", flush=True)
            end_at = time.monotonic() + a.seconds
        elif i > a.warmup:
            steps += 1
            images += x.size(0)
            step_s += now - end
            mine = {k: model.times[k] - before[k] for k in PARTS}
            for k in PARTS:
                parts[k] += mine[k]
            if log is not None:
                log.write(f"{time.monotonic():.4f} {(now - end) * 1e3:.3f} "
                          + " ".join(f"{mine[k] * 1e3:.3f}" for k in PARTS) + "\n")
        end = now
        if end_at is not None and time.monotonic() >= end_at:
            break
    if log is not None:
        log.close()
    print("RESULT " + json.dumps({"steps": steps, "images_per_s": images / step_s if step_s else None,
                                  "step_ms": step_s / steps * 1e3 if steps else None,
                                  "shares": {k: v / step_s for k, v in parts.items()} if step_s else None,
                                  "devices": len(model.device_ids),
                                  "model": "torchvision" if torchvision is not None else "plain"}), flush=True)


if __name__ == "__main__":
    main()
