"""Makes tests/fixtures/h200x4_ddp_synthetic.jsonl: the real 2-rank DDP recording on 2 H200s
(h200x2_ddp_straggler.jsonl, rank 1 planted slow) made a 4-rank job on 4 GPUs, for the compact GPU
panel's snapshot and screenshot. Synthetic, and said so in its note: ranks 2 and 3 are copies of
rank 0 (its process, its channel's rank row) on GPUs 2 and 3, copies of GPU 0; nothing else changes.

    .venv/bin/python tests/helpers/four_gpus.py
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCE, TARGET = FIXTURES / "h200x2_ddp_straggler.jsonl", FIXTURES / "h200x4_ddp_synthetic.jsonl"
COPIES = {2: 680, 3: 681}  # new rank (and its GPU) -> its PID; each a copy of rank 0, PID 678 on GPU 0


def four_gpus(cycle: dict) -> dict:
    cycle = copy.deepcopy(cycle)
    gpu0 = next(g for g in cycle["gpus"] if g["index"] == 0)
    rank0 = next(r for r in cycle["ranks"] if r["rank"] == 0)
    proc0 = next(p for p in cycle["process"]["procs"] if p["pid"] == 678)
    for k, pid in COPIES.items():
        gpu = copy.deepcopy(gpu0)
        gpu["index"] = k
        for p in gpu["processes"]:
            p["pid"] = pid
        cycle["gpus"].append(gpu)
        cycle["ranks"].append({**copy.deepcopy(rank0), "rank": k, "pid": pid, "local_rank": k, "gpu": k})
        cycle["process"]["procs"].append({**copy.deepcopy(proc0), "pid": pid, "loop": False})
    cycle["training"]["world_size"] = 4
    return cycle


def main() -> None:
    lines = SOURCE.read_text().splitlines()
    head = json.loads(lines[0])
    head["note"] = ("SYNTHETIC (tests/helpers/four_gpus.py): " + head["note"] +
                    "; ranks 2 and 3 added as copies of rank 0, on GPUs 2 and 3 (copies of GPU 0)")
    out = [json.dumps(head, separators=(",", ":"))] + [json.dumps(four_gpus(json.loads(line)), separators=(",", ":")) for line in lines[1:]]
    TARGET.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
