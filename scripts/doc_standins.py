#!/usr/bin/env python3
"""doc_standins.py: offline stand-ins for the downloads of docs/newyorker.md, used by
scripts/check_doc_commands.sh (python3 stdlib only).

    doc_standins.py datasets SYNTH_DIR OUT_DIR
        writes OUT_DIR/datasets/__init__.py: a `datasets` module whose load_dataset(name,
        config, split=...) returns rows shaped like jmhessel/newyorker_caption_contest's
        `matching` config (image {"bytes", "path"}, contest_number, image_description,
        caption_choices (5), label "A".."E", instance_id, and the other columns), built from
        the JPEGs and captions of a `bt-data synth` directory (two rows per cartoon, as the
        real set repeats cartoons). Put OUT_DIR on PYTHONPATH.
    doc_standins.py model-config SRC_CONFIG OUT_CONFIG
        a copy of a model config.json whose text position table takes 128-token texts
        (max_position_embeddings 130), the length the New Yorker configs train with.

Deliberately not here: anything that imitates the Hub's downloads themselves (the check script
builds the model directory with bt-checkpoint --init)."""
import json
import os
import sys

MODULE = '''"""A stand-in of the `datasets` library for scripts/check_doc_commands.sh (offline)."""
import json
import os

_ROWS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rows.json")


class Image:
    """datasets.Image: only decode=False (the stored bytes) is what the export asks for."""

    def __init__(self, decode=True):
        self.decode = decode


class _Split(list):
    def cast_column(self, column, feature):
        if column != "image" or not isinstance(feature, Image) or feature.decode:
            raise ValueError("stand-in datasets: only cast_column('image', Image(decode=False))")
        return self


def load_dataset(name, config=None, split=None, **kwargs):
    if name != "jmhessel/newyorker_caption_contest" or config != "matching":
        raise ValueError(f"stand-in datasets: only jmhessel/newyorker_caption_contest / "
                         f"matching, not {name} / {config}")
    rows = json.load(open(_ROWS))[split]
    for r in rows:
        with open(r["image"]["path"], "rb") as f:
            r["image"] = {"bytes": f.read(), "path": None}
    return _Split(rows)
'''


def make_datasets(synth, out):
    pkg = os.path.join(out, "datasets")
    os.makedirs(pkg, exist_ok=True)
    splits = {}
    contest = 0
    for split, src in (("train", "train"), ("validation", "val"), ("test", "test")):
        recs = [json.loads(line) for line in open(os.path.join(synth, f"{src}.jsonl"))]
        rows = []
        for i, r in enumerate(recs):
            caps = [x["caption"] for x in recs]
            label = i % 5
            choices = [caps[(i + k - label) % len(caps)] for k in range(5)]
            for dup in range(2):  # every cartoon twice, as the real set repeats them
                rows.append({
                    "image": {"bytes": None, "path": os.path.join(synth, r["image"])},
                    "contest_number": contest,
                    "image_location": "an office",
                    "image_description": r["caption"],
                    "image_uncanny_description": "nothing",
                    "entities": [],
                    "questions": [],
                    "caption_choices": choices,
                    "from_description": "",
                    "label": "ABCDE"[label],
                    "n_tokens_label": 1,
                    "instance_id": f"{split}-{contest}-{dup}",
                })
            contest += 1
        splits[split] = rows
    json.dump(splits, open(os.path.join(pkg, "rows.json"), "w"))
    open(os.path.join(pkg, "__init__.py"), "w").write(MODULE)


def make_model_config(src, out):
    c = json.load(open(src))
    c["text_config"]["max_position_embeddings"] = 130
    json.dump(c, open(out, "w"), indent=2)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "datasets":
        make_datasets(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "model-config":
        make_model_config(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
