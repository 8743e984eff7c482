"""A Hugging Face Trainer job, as a user writes one: a small GPT-2 built from GPT2Config (no download) on
synthetic random tokens (a torch Dataset), `Trainer` + `TrainingArguments`, run for --seconds by a
TrainerCallback that stops the training. No tuimon import: run it plainly, under `tuimon run`, or inject
into it. With 2+ visible GPUs the Trainer wraps the model in torch.nn.DataParallel on its own (n_gpu > 1,
no launcher): kept so (issue 43's case).

    python hf_trainer.py [--seconds 30] [--device cuda|cpu] [--layers 4] [--embd 256] [--vocab 8192]
        [--seq 256] [--batch 32] [--workers 2] [--warmup 20] [--step-log FILE]

--batch is per device (the Trainer's per_device_train_batch_size: DataParallel's batch is --batch x n_gpu).
The callback's own throughput, over the steps after the first --warmup: steps/s and samples/s, printed at
the end as one line `RESULT {json}` (steps, samples_per_s, step_ms, n_gpu, ...). --step-log: each step's
end (time.monotonic(), CLOCK_MONOTONIC: comparable across processes), a line each, as the job runs."""

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


class Timed(TrainerCallback):
    """Stops the training after `seconds` (from the training's start) and times the steps after the warm-up."""

    def __init__(self, seconds, warmup, step_log=None):
        self.seconds, self.warmup = seconds, warmup
        self.ends: list[float] = []
        self.t0 = None
        self.log = open(step_log, "w", buffering=1) if step_log else None

    def on_train_begin(self, args, state, control, **kwargs):
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
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if not cuda:
        torch.set_num_threads(1)  # (a smoke test on a shared CPU)

    config = GPT2Config(n_layer=a.layers, n_embd=a.embd, n_head=a.heads, vocab_size=a.vocab, n_positions=a.seq,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    timed = Timed(a.seconds, a.warmup, a.step_log)
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
              "device": a.device, "wrapped": wrapped, "seconds": a.seconds}
    if len(ends) >= 2:
        span = ends[-1] - ends[0]
        steps_per_s = (len(ends) - 1) / span
        result.update(steps_per_s=round(steps_per_s, 4), samples_per_s=round(steps_per_s * batch, 2),
                      step_ms=round(1e3 / steps_per_s, 3))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
