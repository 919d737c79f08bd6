"""Symbolic dims: integer expressions over named sizes, kept in one canonical form.

A `Sym` is a polynomial with integer coefficients whose variables ("atoms") are named
size symbols ("N", "seq") or opaque floor divisions and remainders of two such
expressions ("(H-1)//2"). The polynomial is kept expanded, its terms and the factors of
each term sorted, so that dims computed the same way in any order are equal values with
one hash and one printed form: N*C and C*N, (N+1)*2 and 2+2*N, N*(C*H) divided by C and
N*H. Arithmetic whose result is constant gives a plain int, so a dim is always an int or
a `Sym`, never a `Sym` holding a number.

Floor division and modulo simplify what is exact for integer-valued symbols
((4*N+2)//2 is 2*N+1, (2*N+1)//2 is N, (6*N+1)%3 is 1); what remains is one atom.

Text is for people, for the `Sym("3*N")` shorthand and for the dims older files wrote as
text ("N*C"): `Sym(text)` parses an expression (names, integers, + - * / // % and
parentheses; `/` is floor division, as dims are integers), and a text that is not one is
taken whole as a name. Frontends name symbols with `Sym.named`, which never parses (an
ONNX dim_param "seq + 1" is one symbol). Files store dims with `to_json`/`from_json`, a
tree that needs no parsing.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

import numpy as np

# Expansion of products of sums can grow without bound; shapes never need more terms than
# this, and a hostile file or model must not make ge-hub multiply out 2**40 terms.
MAX_TERMS = 256
# Nesting of stored or parsed expressions (parentheses, JSON trees).
MAX_DEPTH = 64

# A name written bare in text and in files: no operator, parenthesis or space in it, and
# not all digits (that is an integer).
_BARE_NAME = re.compile(r"[^\s()+\-*/%]+\Z")
_TOKEN = re.compile(r"\s*(?:(\d+)(?![^\s()+\-*/%])|(//|[-+*/%()])|([^\s()+\-*/%]+))")


@dataclasses.dataclass(frozen=True)
class _Div:
    """An atom that does not simplify further: `left // right` or `left % right`."""

    op: str  # "//" or "%"
    left: Dim
    right: Dim


_Atom = Union[str, _Div]  # a symbol's name, or a division
_Monomial = tuple  # of atoms, sorted by _atom_key, an atom repeated for a power
_Poly = dict  # monomial -> nonzero coefficient; () is the constant term


class Sym:
    """A symbolic dim: a named symbol or an expression over symbols (see the module doc).

    `Sym("N")` is the symbol N and `Sym("3*N")` the expression 3*N; `Sym.named(text)` is
    always one symbol. Sym values are immutable and hashable, compare equal when they
    are the same expression, and support + - * // % with ints and each other.
    """

    __slots__ = ("_hash", "_terms")

    def __init__(self, text: str):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"a symbolic dim needs a non-empty name, got {text!r}")
        if _BARE_NAME.match(text) and not text.isdigit():
            terms = _terms_of({(text,): 1})
        else:
            parsed = _parse(text)
            if parsed is None:
                terms = _terms_of({(text,): 1})
            elif isinstance(parsed, int):
                raise ValueError(f"symbolic dim {text!r} is the constant {parsed}; "
                                 "a constant dim is an int")
            else:
                terms = parsed._terms
        self._set(terms)

    @classmethod
    def named(cls, name: str) -> Sym:
        """The symbol called `name`, whatever characters it holds (never parsed)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a symbolic dim needs a non-empty name, got {name!r}")
        return _make(_terms_of({(name,): 1}))

    def _set(self, terms: tuple) -> None:
        object.__setattr__(self, "_terms", terms)
        object.__setattr__(self, "_hash", hash(terms))

    def __setattr__(self, key, value):
        raise AttributeError("Sym is immutable")

    # -- what it is ----------------------------------------------------------------

    @property
    def is_symbol(self) -> bool:
        """True for a plain named symbol (N), False for an expression (N+1, 2*N)."""
        ((mono, coeff),) = self._terms if len(self._terms) == 1 else ((None, 0),)
        return coeff == 1 and len(mono) == 1 and isinstance(mono[0], str)

    @property
    def name(self) -> str:
        """A plain symbol's name; for an expression, its printed form (for messages:
        code that binds symbols uses the Sym itself or `symbols`)."""
        return self._terms[0][0][0] if self.is_symbol else str(self)

    @property
    def term(self) -> tuple[int, tuple[Sym, ...]] | None:
        """(coefficient, factors) when the dim is one product term (3*N*C gives 3 and
        (C, N)), each factor a symbol or a division; None for a sum."""
        if len(self._terms) != 1:
            return None
        ((mono, coeff),) = self._terms
        return coeff, tuple(Sym.named(a) if isinstance(a, str) else _atom(a) for a in mono)

    @property
    def symbols(self) -> frozenset[str]:
        """The names of the symbols the dim depends on."""
        names: set[str] = set()
        for mono, _ in self._terms:
            for atom in mono:
                if isinstance(atom, str):
                    names.add(atom)
                else:
                    names |= free_symbols(atom.left) | free_symbols(atom.right)
        return frozenset(names)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The dim's value when every symbol in it has a value in `bindings`."""
        result = subs(self, bindings)
        if not isinstance(result, int):
            missing = sorted(self.symbols - set(bindings))
            raise KeyError(f"symbolic dim {self} needs a value for {', '.join(missing)}")
        return result

    def subs(self, bindings: Mapping[str, Any]) -> Dim:
        """The dim with the symbols named in `bindings` replaced (see `subs`)."""
        return subs(self, bindings)

    # -- comparison and printing ----------------------------------------------------

    def __eq__(self, other):
        if isinstance(other, Sym):
            return self._hash == other._hash and self._terms == other._terms
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        # A symbol prints as its name whatever it holds; inside an expression a name with
        # operators or spaces in it is put in parentheses.
        return self._terms[0][0][0] if self.is_symbol else _format(self._terms)

    def __repr__(self) -> str:
        text = str(self)
        if self.is_symbol and (text.isdigit() or not _BARE_NAME.match(text)):
            return f"Sym.named({text!r})"
        return f"Sym({text!r})"

    def __reduce__(self):
        return (from_json, (to_json(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    # -- arithmetic -----------------------------------------------------------------

    def __add__(self, other): return add(self, other) if _is_dim(other) else NotImplemented
    def __radd__(self, other): return add(other, self) if _is_dim(other) else NotImplemented
    def __sub__(self, other): return sub(self, other) if _is_dim(other) else NotImplemented
    def __rsub__(self, other): return sub(other, self) if _is_dim(other) else NotImplemented
    def __mul__(self, other): return mul(self, other) if _is_dim(other) else NotImplemented
    def __rmul__(self, other): return mul(other, self) if _is_dim(other) else NotImplemented
    def __floordiv__(self, other):
        return floordiv(self, other) if _is_dim(other) else NotImplemented
    def __rfloordiv__(self, other):
        return floordiv(other, self) if _is_dim(other) else NotImplemented
    def __mod__(self, other): return mod(self, other) if _is_dim(other) else NotImplemented
    def __rmod__(self, other): return mod(other, self) if _is_dim(other) else NotImplemented
    def __neg__(self): return mul(self, -1)


Dim = Union[int, Sym]


def _is_dim(value) -> bool:
    """An int (NumPy's too) or a Sym; a bool is not a dim."""
    return isinstance(value, (Sym, numbers.Integral)) and not isinstance(value, (bool, np.bool_))


def _norm(dim: Any) -> Dim:
    """A dim as an int or a Sym (NumPy ints become ints)."""
    if isinstance(dim, Sym) or type(dim) is int:
        return dim
    if not _is_dim(dim):
        raise TypeError(f"a dim is an int or a Sym, got {dim!r}")
    return int(dim)


def _make(terms: tuple) -> Sym:
    sym = object.__new__(Sym)
    sym._set(terms)
    return sym


# -- canonical form ----------------------------------------------------------------------


def _atom_key(atom: _Atom) -> tuple:
    if isinstance(atom, str):
        return (0, atom, ())
    return (1, atom.op, _dim_key(atom.left), _dim_key(atom.right))


def _dim_key(dim: Dim) -> tuple:
    if isinstance(dim, int):
        return (0, dim)
    return (1, tuple((tuple(_atom_key(a) for a in mono), coeff) for mono, coeff in dim._terms))


def _term_key(item: tuple) -> tuple:
    mono = item[0]
    return (not mono, tuple(_atom_key(a) for a in mono))  # the constant term last


def _terms_of(poly: _Poly) -> tuple:
    return tuple(sorted(((m, c) for m, c in poly.items() if c), key=_term_key))


def _poly(dim: Dim) -> _Poly:
    if isinstance(dim, Sym):
        return dict(dim._terms)
    return {(): dim} if dim else {}


def _from_poly(poly: _Poly) -> Dim:
    poly = {m: c for m, c in poly.items() if c}
    if len(poly) > MAX_TERMS:
        raise ValueError(f"a symbolic dim of {len(poly)} terms is past the limit of "
                         f"{MAX_TERMS}")
    if not poly.keys() - {()}:
        return poly.get((), 0)
    return _make(_terms_of(poly))


def _mono_mul(a: _Monomial, b: _Monomial) -> _Monomial:
    return tuple(sorted(a + b, key=_atom_key))


# -- arithmetic --------------------------------------------------------------------------


def add(a: Dim, b: Dim) -> Dim:
    """a + b."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    poly = _poly(a)
    for mono, coeff in _poly(b).items():
        poly[mono] = poly.get(mono, 0) + coeff
    return _from_poly(poly)


def sub(a: Dim, b: Dim) -> Dim:
    """a - b."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return add(a, mul(b, -1))


def mul(a: Dim, b: Dim) -> Dim:
    """a * b, multiplied out."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    pa, pb = _poly(a), _poly(b)
    poly: _Poly = {}
    for ma, ca in pa.items():
        for mb, cb in pb.items():
            mono = _mono_mul(ma, mb)
            poly[mono] = poly.get(mono, 0) + ca * cb
    return _from_poly(poly)


def prod(dims: Iterable[Dim]) -> Dim:
    """The product of `dims` (1 for none)."""
    result: Dim = 1
    for d in dims:
        result = mul(result, d)
    return result


def _split_by(poly: _Poly, divisor: int) -> tuple[_Poly, _Poly]:
    """(quotient, rest): the terms whose coefficient `divisor` divides, divided, and the
    other terms; poly == divisor * quotient + rest."""
    quotient = {m: c // divisor for m, c in poly.items() if c % divisor == 0}
    rest = {m: c for m, c in poly.items() if c % divisor}
    return quotient, rest


def _exact_quotient(a: Dim, b: Sym) -> Dim | None:
    """a / b when b is one term (c*X*Y) that divides every term of a, or a equals k*b."""
    if a == b:
        return 1
    if len(b._terms) != 1:
        return None
    (mono_b, coeff_b), = b._terms
    quotient: _Poly = {}
    for mono, coeff in _poly(a).items():
        rest = list(mono)
        for atom in mono_b:
            if atom not in rest:
                return None
            rest.remove(atom)
        if coeff % coeff_b:
            return None
        quotient[tuple(rest)] = coeff // coeff_b
    return _from_poly(quotient)


def floordiv(a: Dim, b: Dim) -> Dim:
    """a // b (floor division; dims are integers)."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if b == 1:
        return a
    if a == 0:
        return 0
    if isinstance(b, int) and b > 1:
        # floor((b*Q + R) / b) = Q + floor(R / b) for integer-valued Q.
        quotient, rest = _split_by(_poly(a), b)
        rest_dim = _from_poly(rest)
        if isinstance(rest_dim, int):
            return add(_from_poly(quotient), rest_dim // b)
        return add(_from_poly(quotient), _atom(_Div("//", rest_dim, b)))
    if isinstance(b, Sym):
        exact = _exact_quotient(a, b)
        if exact is not None:
            return exact
    if b == 0:
        raise ZeroDivisionError(f"symbolic dim {a} divided by 0")
    return _atom(_Div("//", a, b))


def mod(a: Dim, b: Dim) -> Dim:
    """a % b (the remainder of floor division)."""
    a, b = _norm(a), _norm(b)
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if b == 1 or a == 0:
        return 0
    if isinstance(b, int) and b > 1:
        # (b*Q + R) % b = R % b.
        _, rest = _split_by(_poly(a), b)
        rest_dim = _from_poly(rest)
        if isinstance(rest_dim, int):
            return rest_dim % b
        return _atom(_Div("%", rest_dim, b))
    if isinstance(b, Sym) and _exact_quotient(a, b) is not None:
        return 0
    if b == 0:
        raise ZeroDivisionError(f"symbolic dim {a} modulo 0")
    return _atom(_Div("%", a, b))


def _atom(atom: _Div) -> Sym:
    return _make(_terms_of({(atom,): 1}))


# -- symbols and values ------------------------------------------------------------------


def free_symbols(dim: Dim) -> frozenset[str]:
    """The names of the symbols `dim` depends on (none for an int)."""
    return dim.symbols if isinstance(dim, Sym) else frozenset()


def subs(dim: Dim, bindings: Mapping[str, Any]) -> Dim:
    """`dim` with each symbol named in `bindings` replaced by its value (an int or a dim),
    simplified; symbols not named stay."""
    if isinstance(dim, int):
        return dim
    result: Dim = 0
    for mono, coeff in dim._terms:
        term: Dim = coeff
        for atom in mono:
            if isinstance(atom, str):
                value = bindings.get(atom)
                factor = Sym.named(atom) if value is None else value
            else:
                left, right = subs(atom.left, bindings), subs(atom.right, bindings)
                factor = floordiv(left, right) if atom.op == "//" else mod(left, right)
            term = mul(term, factor)
        result = add(result, term)
    return result


def evaluate(dim: Dim, bindings: Mapping[str, int]) -> int:
    """The value of `dim` given every symbol in it (an int stays itself)."""
    return dim if isinstance(dim, int) else dim.evaluate(bindings)


# -- printing ----------------------------------------------------------------------------


def _format_atom(atom: _Atom) -> str:
    if isinstance(atom, str):
        return atom if _BARE_NAME.match(atom) and not atom.isdigit() else f"({atom})"
    return f"{_format_operand(atom.left)}{atom.op}{_format_operand(atom.right)}"


def _format_operand(dim: Dim) -> str:
    if isinstance(dim, int):
        return str(dim) if dim >= 0 else f"({dim})"
    ((mono, coeff),) = dim._terms if len(dim._terms) == 1 else ((None, 0),)
    if coeff == 1 and len(mono) == 1 and isinstance(mono[0], str):
        return _format_atom(mono[0])
    return f"({dim})"


def _format_term(mono: _Monomial, coeff: int) -> str:
    """A term with a non-negative coefficient."""
    if not mono:
        return str(coeff)
    factors = [_format_atom(a) for a in mono]
    if len(mono) > 1 or coeff != 1:  # a division beside other factors keeps its own ()
        factors = [f"({f})" if isinstance(a, _Div) else f for a, f in zip(mono, factors)]
    return "*".join(([str(coeff)] if coeff != 1 else []) + factors)


def _format(terms: tuple) -> str:
    parts = []
    for i, (mono, coeff) in enumerate(terms):
        sign = "-" if coeff < 0 else ("+" if i else "")
        parts.append(sign + _format_term(mono, abs(coeff)))
    return "".join(parts)


# -- parsing (Sym("3*N") and text from before dims were structured) ----------------------


def _parse(text: str) -> Dim | None:
    """The expression `text` spells, or None when it is not one."""
    tokens: list[tuple[str, Any]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            return None
        number, operator, name = match.groups()
        tokens.append(("int", int(number)) if number is not None else
                      ("op", operator) if operator is not None else ("name", name))
        position = match.end()
    parser = _Parser(tokens)
    try:
        result = parser.expression(0)
    except _NotAnExpression:
        return None
    return result if parser.position == len(tokens) else None


class _NotAnExpression(Exception):
    pass


class _Parser:
    """Recursive descent over + - (lowest), * / // %, unary -, atoms and parentheses."""

    def __init__(self, tokens: list[tuple[str, Any]]):
        self.tokens = tokens
        self.position = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, Any]:
        token = self.peek()
        if token is None:
            raise _NotAnExpression
        self.position += 1
        return token

    def expression(self, depth: int) -> Dim:
        result = self.term(depth)
        while self.peek() in (("op", "+"), ("op", "-")):
            operator = self.take()[1]
            right = self.term(depth)
            result = add(result, right) if operator == "+" else sub(result, right)
        return result

    def term(self, depth: int) -> Dim:
        result = self.unary(depth)
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "//"), ("op", "%")):
            operator = self.take()[1]
            right = self.unary(depth)
            if operator == "*":
                result = mul(result, right)
            elif right == 0:
                raise _NotAnExpression
            else:
                result = mod(result, right) if operator == "%" else floordiv(result, right)
        return result

    def unary(self, depth: int) -> Dim:
        if depth >= MAX_DEPTH:
            raise ValueError(f"a symbolic dim nests deeper than {MAX_DEPTH}")
        if self.peek() == ("op", "-"):
            self.take()
            return mul(self.unary(depth + 1), -1)
        kind, value = self.take()
        if kind == "int":
            return value
        if kind == "name":
            return Sym.named(value)
        if value != "(":
            raise _NotAnExpression
        inner = self.expression(depth + 1)
        if self.take() != ("op", ")"):
            raise _NotAnExpression
        return inner


# -- the stored form -----------------------------------------------------------------------


def to_json(dim: Dim) -> Any:
    """`dim` as JSON data: an int; a symbol's name as a string when it is a bare name, else
    {"sym": name}; an expression as {"add": [...]}, {"mul": [...]}, {"floordiv": [a, b]}
    or {"mod": [a, b]} over those."""
    if isinstance(dim, int):
        return dim
    terms = [_term_json(mono, coeff) for mono, coeff in dim._terms]
    return terms[0] if len(terms) == 1 else {"add": terms}


def _atom_json(atom: _Atom) -> Any:
    if isinstance(atom, str):
        return atom if _BARE_NAME.match(atom) and not atom.isdigit() else {"sym": atom}
    key = "floordiv" if atom.op == "//" else "mod"
    return {key: [to_json(atom.left), to_json(atom.right)]}


def _term_json(mono: _Monomial, coeff: int) -> Any:
    if not mono:
        return coeff
    factors = ([coeff] if coeff != 1 else []) + [_atom_json(a) for a in mono]
    return factors[0] if len(factors) == 1 else {"mul": factors}


def from_json(data: Any, depth: int = 0) -> Dim:
    """The dim `to_json` wrote. A string holding operators is the text form files had
    before dims were structured ("N*C", "(H-3)/2"), read as that expression unless it
    has spaces (which that form never wrote: such a string is one symbol's name).
    Malformed data raises ValueError."""
    if type(data) is int:
        if depth == 0 and data < 0:
            raise ValueError(f"a dim must be >= 0, got {data}")
        return data
    if isinstance(data, str):
        if not data:
            raise ValueError("a symbol name must not be empty")
        if _BARE_NAME.match(data) or any(c.isspace() for c in data):
            return Sym.named(data)
        return Sym(data)
    if isinstance(data, dict) and len(data) == 1:
        if depth >= MAX_DEPTH:
            raise ValueError(f"a symbolic dim nests deeper than {MAX_DEPTH}")
        ((key, args),) = data.items()
        if key == "sym" and isinstance(args, str) and args:
            return Sym.named(args)
        if isinstance(args, list) and args:
            if len(args) > MAX_TERMS:
                raise ValueError(f"a symbolic dim {key!r} of {len(args)} operands is past "
                                 f"the limit of {MAX_TERMS}")
            operands = [from_json(a, depth + 1) for a in args]
            if key == "add":
                return _fold(add, operands)
            if key == "mul":
                return _fold(mul, operands)
            if key in ("floordiv", "mod") and len(operands) == 2:
                if operands[1] == 0:
                    raise ValueError(f"a symbolic dim {key}s by 0")
                return (floordiv if key == "floordiv" else mod)(*operands)
    raise ValueError(f"not a dim: {data!r:.80}")


def _fold(function, operands: list[Dim]) -> Dim:
    result = operands[0]
    for operand in operands[1:]:
        result = function(result, operand)
    return result
