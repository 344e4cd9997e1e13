"""Recompute docs/sizing's estimate with the current method from the recorded pilot
measurements (docs/sizing/estimate.json) and the pass counts of the pilot's printed profile.

    python docs/sizing/recompute_estimate.py      # from the checkout's root
"""

import json
from pathlib import Path

from rewardprof.manifest.load import load_config
from rewardprof.tools.estimate import estimate
from rewardprof.tools.estimate_report import to_markdown

rec = json.loads(Path("docs/sizing/estimate.json").read_text())
# pass counts out of 4 per task, from the pilot's profile table (docs/sizing.md): ifeval_small
# had mean pass rate 0.188 with shares 0.75 at 0 and 0.125 at 1: six 0/4, one 4/4, one 2/4
counts = {
    "math_small": [(4, 0)] * 6,
    "mcq_small": [(4, 0)] * 8,
    "ifeval_small": [(4, 0)] * 6 + [(4, 4), (4, 2)],
    "code_small": [(4, 0)] * 4,
    "arithmetic": [(4, 0)] * 12,
}
pilot = dict(rec["pilot"])
pilot["labels"] = {
    lab["label"]: {
        "environment": lab["environment"],
        "tasks": lab["tasks"],
        "num_repeats": lab["num_repeats"],
        "rollouts": lab["rollouts"],
        "mean_output_tokens": lab["mean_output_tokens"],
        "gpu_hours": lab["gpu_hours"],
        "cost_share": lab["cost_share"],
        "rollouts_per_gpu_hour": lab["rollouts_per_gpu_hour"],
        "counts": counts[lab["label"]],
    }
    for lab in rec["pilot_labels"]
}
target = load_config("config/examples/full.yaml")
tasks = {lab["label"]: lab["tasks"] for lab in rec["labels"]}
print(to_markdown(estimate(pilot, target, 16, 1, tasks)))
