"""The pass context: what one compilation hands to its passes and rules.

A `PassContext` carries the compile options, the registry (ops, kernels, passes) that
this compilation uses, the target device, and a log of what every rule matched, fired
and refused, with the reason. `ge_hub.compile` makes one per plan; `rewrite.apply`
makes one when it is called outside the compiler. A pass receives it when its function
has a parameter named `ctx`; a rule's `check` always receives it first.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ge_hub.registry import Registry


@dataclasses.dataclass(frozen=True)
class LogEntry:
    """One event of a rule: `fired`, or `refused` with the reason."""

    rule: str
    event: str
    nodes: tuple[str, ...]
    reason: str = ""

    def __str__(self) -> str:
        where = ", ".join(self.nodes)
        tail = f": {self.reason}" if self.reason else ""
        return f"{self.rule} {self.event} at [{where}]{tail}"


class PassContext:
    """Options, registry, device and the rule log of one compilation."""

    def __init__(self, options: Mapping[str, Any] | None = None,
                 registry: Registry | None = None, device: str | None = None):
        from ge_hub.plugins import get_registry

        self.options: dict[str, Any] = dict(options or {})
        self.registry: Registry = registry if registry is not None else get_registry()
        self.device: str = device or self.options.get("device", "cpu")
        self.log: list[LogEntry] = []
        self.fired: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        # The rule and nodes being checked, so that `reject` knows what it refuses.
        self.current_rule: str | None = None
        self.current_nodes: tuple[str, ...] = ()
        self.match = None
        self._rejection: str | None = None

    @property
    def verify(self) -> bool:
        return bool(self.options.get("verify", False))

    def rule_enabled(self, name: str, default: bool = True) -> bool:
        """Whether a rule runs: `disable_rules` and `enable_rules` override its default."""
        if name in self.options.get("disable_rules", ()):
            return False
        if name in self.options.get("enable_rules", ()):
            return True
        return default

    def reject(self, reason: str) -> bool:
        """Refuse the match being checked, saying why; returns False, so that a check can
        end with `return ok or ctx.reject("why not")`."""
        self._rejection = str(reason)
        return False

    def take_rejection(self) -> str | None:
        reason, self._rejection = self._rejection, None
        return reason

    def record(self, rule: str, event: str, nodes: tuple[str, ...], reason: str = "") -> None:
        self.log.append(LogEntry(rule, event, nodes, reason))
        if event == "fired":
            self.fired[rule] += 1
        else:
            self.refused[rule] += 1

    def refusals(self, rule: str | None = None) -> list[LogEntry]:
        return [e for e in self.log if e.event == "refused" and rule in (None, e.rule)]
