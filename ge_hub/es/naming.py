"""How ES spells op, input and domain names as Python identifiers.

ONNX names are CamelCase (`MatMul`, `GlobalAveragePool`, `IsNaN`, `ReduceL2`); ES
functions are snake_case (`mat_mul`, `global_average_pool`, `is_nan`, `reduce_l2`).
Names that would be Python keywords (`And`, `If`) get a trailing underscore (`and_`,
`if_`), as PEP 8 suggests, so that `es.and_(a, b)` can be written at all.
"""

from __future__ import annotations

import keyword
import re

# Words that CamelCase splitting would cut in the wrong place ("NaN" is not "Na"+"N").
_WHOLE_WORDS = {"NaN": "Nan"}

_ACRONYM_THEN_WORD = re.compile(r"([A-Z]+)([A-Z][a-z])")  # "QLinear" -> "Q_Linear"
_LOWER_THEN_UPPER = re.compile(r"([a-z])([A-Z])")  # "MatMul" -> "Mat_Mul"
_DIGIT_THEN_WORD = re.compile(r"(\d)([A-Z][a-z])")  # "Log2Sum" -> "Log2_Sum"; "ReduceL2" stays

# Extra spellings people reach for first; each maps to the ONNX name.
ALIASES = {"matmul": "MatMul", "prelu": "PRelu"}


def snake_case(name: str) -> str:
    """The snake_case spelling of a CamelCase op or input name, as an identifier."""
    for word, replacement in _WHOLE_WORDS.items():
        name = name.replace(word, replacement)
    name = _ACRONYM_THEN_WORD.sub(r"\1_\2", name)
    name = _LOWER_THEN_UPPER.sub(r"\1_\2", name)
    name = _DIGIT_THEN_WORD.sub(r"\1_\2", name)
    return python_identifier(name.lower())


def python_identifier(name: str) -> str:
    """`name` made usable as a Python identifier: keywords get a trailing underscore."""
    name = re.sub(r"\W", "_", name)
    if name[:1].isdigit():
        name = "_" + name
    return name + "_" if keyword.iskeyword(name) else name


def domain_attribute(domain: str) -> str:
    """The attribute of `ge_hub.es` that holds a domain's ops: dots become underscores."""
    return python_identifier(domain.replace(".", "_"))
