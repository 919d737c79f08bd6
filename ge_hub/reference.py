"""The reference evaluator under its public name: `ge_hub.reference` is what tests and
plugins' tests import (README: "runs a graph with the NumPy references, the oracle for
tests"). It lives in the ops layer, beside the references it runs: `ge_hub.ops.reference`.
"""

from __future__ import annotations

from ge_hub.ops.reference import (
    Environment,
    EvaluationError,
    ReferenceEvaluator,
    current_scope,
    evaluate,
    outer_scope,
    run_subgraph,
)

__all__ = ["Environment", "EvaluationError", "ReferenceEvaluator", "current_scope", "evaluate",
           "outer_scope", "run_subgraph"]
