"""The job's objects stay its own under the probe: nothing of tuimon's is put into a model, so the
job's copy.deepcopy(model), pickle and torch.save of it (a best model kept, an EMA copy, a
checkpoint) work as without tuimon and carry no trace of it, while the forward phase is still timed."""

import json
import subprocess
import sys
import threading

from tests.conftest import tuimon_cmd, wait_for

JOB = r"""
import copy, io, json, os, pickle, sys, time
import torch, torch.distributed as dist
from torch import nn

def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x, module=None):  # (a keyword named as the probe's wrapper's first argument)
        spin(4)
        return self.head(self.body(x))

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
scripted = torch.jit.script(nn.Linear(8, 8))  # a TorchScript root beside the model
net = Net()
ddp = nn.parallel.DistributedDataParallel(Net())
opt, ddp_opt = torch.optim.SGD(net.parameters(), lr=0.01), torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(4, 8)
for model, o in ((net, opt), (ddp, ddp_opt)) * 10:  # (the probe's discovery over: its roots are timed)
    model(scripted(x), module=None).sum().backward()
    o.step()
    o.zero_grad()

checks = {}
def check(name, fn):
    try:
        checks[name] = fn()
    except Exception as e:
        checks[name] = f"{type(e).__name__}: {e}"[:200]

check("deepcopy", lambda: type(copy.deepcopy(net)).__name__)
check("deepcopy ddp", lambda: type(copy.deepcopy(ddp)).__name__)
check("pickle without tuimon", lambda: b"tuimon" not in pickle.dumps(net))
check("torch.save without tuimon", lambda: (torch.save(net, b := io.BytesIO()), b"tuimon" not in b.getvalue())[1])
check("torch.save(ddp.module) without tuimon",  # (its parameters carry the probe's gradient hook)
      lambda: (torch.save(ddp.module, b := io.BytesIO()), b"tuimon" not in b.getvalue())[1])
check("no attribute of tuimon's", lambda: [k for m in (net, ddp, *net.modules()) for k in vars(m) if "tuimon" in k])
check("no hooks", lambda: [len(getattr(m, h)) for m in net.modules()
                           for h in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called")])
check("the copy computes as the model", lambda: bool(torch.equal(copy.deepcopy(net)(x), net(x))))
print("checks " + json.dumps(checks), flush=True)

recent, last = [], time.perf_counter()
while True:  # forward ~4 ms of ~6 ms; the truth over the monitor's window
    a = time.perf_counter()
    loss = net(scripted(x), module=None).sum()
    b = time.perf_counter()
    loss.backward()
    opt.step()
    opt.zero_grad()
    spin(2)
    now = time.perf_counter()
    recent = (recent + [(b - a, now - last)])[-100:]
    last = now
    with open(sys.argv[1] + ".new", "w") as f:
        json.dump({"steps": len(recent), "forward": sum(f for f, _ in recent) / sum(d for _, d in recent)}, f)
    os.replace(sys.argv[1] + ".new", sys.argv[1])
"""


def test_copies_and_pickles_of_the_model_carry_nothing_of_the_probe(shm_dir, tmp_path):
    truth_path = tmp_path / "truth.json"
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "-c", JOB, str(truth_path)),
                           stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True).start()
    try:
        wait_for(lambda: lines or job.poll() is not None, timeout=90, what="the job's checks")
        assert lines and lines[0].startswith("checks "), (lines, job.poll())
        checks = json.loads(lines[0][len("checks "):])
        assert checks == {"deepcopy": "Net", "deepcopy ddp": "DistributedDataParallel", "pickle without tuimon": True,
                          "torch.save without tuimon": True, "torch.save(ddp.module) without tuimon": True,
                          "no attribute of tuimon's": [], "no hooks": [0] * 15,
                          "the copy computes as the model": True}, checks
        wait_for(lambda: truth_path.exists() and json.loads(truth_path.read_text())["steps"] >= 100, timeout=60,
                 what="100 steps")
        p = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json"), capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        truth = json.loads(truth_path.read_text())
    finally:
        job.kill()
        job.wait()
    shares = {ph["name"]: ph["share"] for ph in json.loads(p.stdout)["phases"]}
    assert abs(shares["forward"] - truth["forward"]) <= 0.1, (shares, truth)  # the roots still timed, by their classes
