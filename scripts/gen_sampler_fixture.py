#!/usr/bin/python3
"""gen_sampler_fixture.py: writes tests/fixtures/data/distributed_sampler.json, the index
lists PyTorch's own torch.utils.data.distributed.DistributedSampler yields, read back by
tests/test_sampler.c to check bt's padding / drop_last / rank-striding against the real
definition (not against a transcription of it).

Each case: dataset size N, world size W, drop_last, seed, epoch, the permutation PyTorch
shuffled with (torch.randperm under manual_seed(seed + epoch), as DistributedSampler does),
and the list every rank receives. bt's permutation differs (its generator is documented in
docs/data.md); the test feeds PyTorch's permutation to sampler_rank_indices() and must get
PyTorch's per-rank lists exactly. shuffle=False cases check the identity order too.

Run: /usr/bin/python3 scripts/gen_sampler_fixture.py   (seeds fixed below)
"""
import json
import os

import torch
from torch.utils.data.distributed import DistributedSampler

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "data", "distributed_sampler.json")


def main():
    cases = []
    for n in (1, 2, 3, 5, 7, 8, 16, 17, 24, 25, 100, 101):
        for w in (1, 2, 3, 8):
            for drop_last in (False, True):
                for shuffle, seed, epoch in ((False, 0, 0), (True, 1234, 0), (True, 1234, 3)):
                    if shuffle:
                        g = torch.Generator()
                        g.manual_seed(seed + epoch)
                        perm = torch.randperm(n, generator=g).tolist()
                    else:
                        perm = list(range(n))
                    ranks = []
                    for r in range(w):
                        s = DistributedSampler(range(n), num_replicas=w, rank=r,
                                               shuffle=shuffle, seed=seed, drop_last=drop_last)
                        s.set_epoch(epoch)
                        ranks.append(list(s))
                    cases.append({"n": n, "world_size": w, "drop_last": drop_last,
                                  "shuffle": shuffle, "perm": perm, "ranks": ranks})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/gen_sampler_fixture.py",
                   "torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
