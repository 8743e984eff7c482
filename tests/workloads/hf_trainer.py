"""A Hugging Face Trainer job, as a user writes one: a small GPT-2 built from GPT2Config (no download) on
synthetic random tokens (a torch Dataset), `Trainer` + `TrainingArguments`, run for --seconds by a
TrainerCallback that stops the training. No tuimon import: run it plainly, under `tuimon run`, or inject
into it. With 2+ visible GPUs the Trainer wraps the model in torch.nn.DataParallel on its own (n_gpu > 1,
no launcher): kept so (issue 43's case).

    python hf_trainer.py [--seconds 30] [--device cuda|cpu] [--layers 4] [--embd 256] [--vocab 8192]
        [--seq 256] [--batch 32] [--workers 2] [--warmup 20] [--step-log FILE] [--tuimon-off PARTS]

--batch is per device (the Trainer's per_device_train_batch_size: DataParallel's batch is --batch x n_gpu).
The callback's own throughput, over the steps after the first --warmup: steps/s and samples/s, printed at
the end as one line `RESULT {json}` (steps, samples_per_s, step_ms, n_gpu, ...). --step-log: each step's
end (time.monotonic(), CLOCK_MONOTONIC: comparable across processes), a line each, as the job runs.

--tuimon-off PARTS (a benchmark's knob, issue 43: what of the probe costs this job): under `tuimon run`,
parts of the probe it loaded are turned off at the training's start, comma-separated: `dp` (its
wrappers of DataParallel's replicate, scatter, parallel_apply and gather; without the last, its line
sampler no longer parks while the loop waits in the replicas' join, so compare with `sampler` too),
`syncs` (its Tensor and CUDA sync and copy wrappers), `sampler` (its line sampler paused), `gpu` (its
CUDA-event timing, and with it the memory gauges, which ride on it), `all` (the probe switched off as
its benchmarks switch it, tuimon.probe.api.switch: every wrapper and hook back to the original, no
step counted; the probe's threads stay). The RESULT line says which were turned off (`tuimon_off`),
or why none was (no probe in this process)."""

import argparse
import json
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset):
    """Random token sequences: a pool of 512 drawn once, cycled over a long epoch."""

    def __init__(self, vocab, seq, n=10_000_000):
        g = torch.Generator().manual_seed(0)
        self.pool = torch.randint(0, vocab, (512, seq), generator=g)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = self.pool[i % 512]
        return {"input_ids": ids, "labels": ids}


SYNC_WRAPPERS = {"item", "tolist", "cpu", "__bool__", "__int__", "__float__", "to", "cuda", "copy_", "synchronize"}
DP_WRAPPERS = {"replicate", "scatter", "parallel_apply", "gather"}


def tuimon_off(parts):
    """Turn off these parts of the probe `tuimon run` loaded here; what was turned off, in words."""
    try:
        import torch.nn

        from tuimon.probe import api, state, torch_hooks
    except ImportError:
        return "no tuimon here"
    p = state.probe
    if p is None:
        return "no probe in this process"
    done = []
    for part in parts:
        if part == "all":
            if p.roots is not None and p.roots.discovering:
                p.roots._end_discovery()  # (its global module hooks go; the roots' class wrappers then go with the rest)
            api.switch(p, False)
        elif part in ("dp", "syncs"):
            for owner, name, orig, _ in torch_hooks._swaps:  # (the probe's own list: a benchmark may read it)
                if (name in DP_WRAPPERS and owner is torch.nn.DataParallel) if part == "dp" else name in SYNC_WRAPPERS:
                    setattr(owner, name, orig)
        elif part == "sampler" and p.sampler is not None:
            p.sampler.pause(True)
        elif part == "gpu":
            p.gpu = None
            for timing in (p.dp, p.comm):
                if timing is not None:
                    timing.gpu = None
        else:
            continue
        done.append(part)
    return ",".join(done) or "nothing"


class Timed(TrainerCallback):
    """Stops the training after `seconds` (from the training's start) and times the steps after the warm-up."""

    def __init__(self, seconds, warmup, step_log=None, off=()):
        self.seconds, self.warmup, self.off = seconds, warmup, off
        self.turned_off = None
        self.ends: list[float] = []
        self.t0 = None
        self.log = open(step_log, "w", buffering=1) if step_log else None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.off:
            self.turned_off = tuimon_off(self.off)
        self.t0 = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        t = time.monotonic()
        self.ends.append(t)
        if self.log:
            self.log.write(f"{t:.6f}\n")
        if t - self.t0 >= self.seconds:
            control.should_training_stop = True
        return control


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32, help="per device")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=20, help="steps left out of the throughput")
    ap.add_argument("--step-log")
    ap.add_argument("--tuimon-off", default="", help="parts of the probe turned off: dp,syncs,sampler,gpu,all")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if not cuda:
        torch.set_num_threads(1)  # (a smoke test on a shared CPU)

    config = GPT2Config(n_layer=a.layers, n_embd=a.embd, n_head=a.heads, vocab_size=a.vocab, n_positions=a.seq,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    timed = Timed(a.seconds, a.warmup, a.step_log, [x for x in a.tuimon_off.split(",") if x])
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, report_to="none", save_strategy="no", logging_strategy="no", eval_strategy="no",
            disable_tqdm=True, max_steps=10_000_000, per_device_train_batch_size=a.batch,
            dataloader_num_workers=a.workers, bf16=cuda, use_cpu=not cuda, learning_rate=1e-4, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(a.vocab, a.seq), callbacks=[timed])
        trainer.train()
        n_gpu, batch = trainer.args.n_gpu, trainer.args.train_batch_size  # (train_batch_size: per device x n_gpu)
        wrapped = type(trainer.model_wrapped).__name__
    ends = timed.ends[a.warmup:]
    result = {"steps": len(timed.ends), "timed_steps": max(0, len(ends) - 1), "n_gpu": n_gpu, "batch": batch,
              "device": a.device, "wrapped": wrapped, "seconds": a.seconds, "tuimon_off": timed.turned_off}
    if len(ends) >= 2:
        span = ends[-1] - ends[0]
        steps_per_s = (len(ends) - 1) / span
        result.update(steps_per_s=round(steps_per_s, 4), samples_per_s=round(steps_per_s * batch, 2),
                      step_ms=round(1e3 / steps_per_s, 3))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
