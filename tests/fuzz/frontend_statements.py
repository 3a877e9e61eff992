"""The statements of the capture frontend's fuzz programs: one drawer per kind of Python
construct (assignments, graph breaks, ifs, loops, containers, closures, globals, in-place ops,
grad-mode blocks, try blocks, module and helper calls, Python-level values).

Each drawer returns the lines of one statement and adds the name it defines to the scope. A
tensor name is either exactly (rows, cols) ("full": it may be mutated in place, multiplied as a
matrix, concatenated) or only broadcastable to it, so every statement is valid for any size the
call schedule uses; names defined inside a nested block stay local to it.
"""

from __future__ import annotations

import random

__all__ = ["Drawer"]


class Drawer:
    """The state of one drawing: the random source, the names in scope and a name counter."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.tensors = ["x", "y", "z"]  # names of tensors broadcastable to (rows, cols)
        self.full = {"x", "y", "z"}  # those that are exactly (rows, cols)
        self.floats = ["scale", "GSCALE"]
        self.count = 0
        self.depth = 0

    def new(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def pick(self, full: bool = False) -> str:
        pool = [t for t in self.tensors if t in self.full] if full else self.tensors
        # later names more often, so statements chain
        return pool[min(len(pool) - 1, int(len(pool) * self.rng.random() ** 0.5))]

    def define(self, name: str, full: bool) -> None:
        self.tensors.append(name)
        if full:
            self.full.add(name)

    def number(self) -> str:
        r = self.rng.random()
        if r < 0.3:
            return self.rng.choice(self.floats)
        if r < 0.4:
            return self.rng.choice(["len(rest)", "x.shape[0]", "y.size(1)", "z.dim()"])
        return repr(self.rng.choice([0.5, 2.0, -1.0, 3, 0.25, 1.5]))

    def expression(self) -> tuple[str, bool]:
        """A tensor expression over names in scope: (text, is it exactly (rows, cols))."""
        rng = self.rng
        a, b = self.pick(), self.pick()
        full = a in self.full or b in self.full
        choice = rng.randrange(22)
        if choice == 0:
            return f"{a} + {b}", full
        if choice == 1:
            return f"{a} * {b}", full
        if choice == 2:
            return f"{a} - {b} * {self.number()}", full
        if choice == 3:
            return f"torch.sin({a})", a in self.full
        if choice == 4:
            return f"{a}.relu() + {b}", full
        if choice == 5:
            return f"torch.tanh({a}) * {self.number()}", a in self.full
        if choice == 6:
            return f"torch.where({a} > {b}, {a}, {b})", full
        if choice == 7:
            return f"{a}.sum(dim=-1, keepdim=True)", False
        if choice == 8:
            return f"{a}.mean()", False
        if choice == 9:
            c, d = self.pick(full=True), self.pick(full=True)
            return f"({c} @ {d}.transpose(0, 1)) @ {self.pick(full=True)} * 0.1", True
        if choice == 10:
            c = self.pick(full=True)
            return f"torch.cat([{c}, {b}.expand_as({c})], dim=0)[: {c}.shape[0]]", True
        if choice == 11:
            return f"{self.pick(full=True)}.flip(0) * {b}", True
        if choice == 12:
            c = self.pick(full=True)
            return f"{c}.view(-1).view({c}.shape) + {a}", True
        if choice == 13:
            return f"{a}.abs().sqrt() + {b}", full
        if choice == 14:
            return f"{a}.sigmoid() * GSCALE", a in self.full
        if choice == 15:
            c = self.pick(full=True)
            return f"{c} + torch.arange({c}.shape[1], dtype={c}.dtype)", True
        if choice == 16:
            return f"{a}.clone() * {a}.numel()", a in self.full
        if choice == 17:
            c = self.pick(full=True)
            return f"{c}.t().contiguous().t() - {b}", True
        if choice == 18:
            return f"{a}.pow(2) * 0.5 + {b}", full
        if choice == 19:
            return f"MOD({a})", a in self.full
        if choice == 20:
            return f"{a}.to(torch.float64).float() + {b}", full
        return f"{a}.clamp(min=-1.0, max={self.number()}) * {b}", full

    # ------------------------------------------------------------------ statements

    def statement(self) -> list[str]:
        """One statement (maybe compound) that defines one new name in scope, or mutates."""
        kinds = list(_STATEMENTS)
        weights = [_STATEMENTS[k][1] for k in kinds]
        if self.depth >= 2:  # no deeper nesting
            weights = [0 if _STATEMENTS[k][2] else w for k, w in zip(kinds, weights)]
        kind = self.rng.choices(kinds, weights)[0]
        return _STATEMENTS[kind][0](self)

    def nested(self, target: str, count: int | None = None) -> tuple[list[str], bool]:
        """Lines for a nested block that ends by assigning ``target``; names it defines stay
        local to the block (other paths may not define them)."""
        saved = (list(self.tensors), set(self.full))
        self.depth += 1
        lines: list[str] = []
        for _ in range(self.rng.randint(0, 1) if count is None else count):
            lines += self.statement()
        expr, full = self.expression()
        lines.append(f"{target} = {expr}")
        self.depth -= 1
        self.tensors, self.full = saved
        return lines, full


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _assign(d: Drawer) -> list[str]:
    name = d.new()
    expr, full = d.expression()
    d.define(name, full)
    return [f"{name} = {expr}"]


def _graph_break(d: Drawer) -> list[str]:
    name = d.new()
    a = d.pick()
    choice = d.rng.randrange(7)
    if choice == 0:
        lines = [f'print("step", {d.rng.choice(["len(rest)", "x.shape[0]", "7"])}, file=SINK)']
    elif choice == 1:
        lines = ["torch._dynamo.graph_break()"]
    elif choice == 2:
        d.define(name, a in d.full)
        return [f"{name} = disabled_helper({a}, {d.rng.choice(['2', '0.5', 'len(rest)'])})"]
    elif choice == 3:
        f = d.new("f")
        d.floats.append(f)
        d.define(name, a in d.full)
        return [f"{f} = {a}.sum().item()", f"{name} = {a} * {f} if {f} > 0 else {a} - 1.0"]
    elif choice == 4:
        lst = d.new("l")
        c = d.pick(full=True)
        d.define(name, True)
        return [f"{lst} = {c}.sum(1).tolist()", f"{name} = {c} * len({lst}) + sum({lst})"]
    elif choice == 5:
        arr = d.new("arr")
        d.define(name, a in d.full)
        return [f"{arr} = {a}.detach().numpy()", f"{name} = {a} + float({arr}.mean())"]
    else:
        lines = [f"torch.compiler.disable(helper)({a}, 1.0)"]  # a call run eagerly
    expr, full = d.expression()
    d.define(name, full)
    return lines + [f"{name} = {expr}"]


def _if_values(d: Drawer) -> list[str]:
    name = d.new()
    a = d.pick()
    cond = d.rng.choice(
        [
            f"{a}.sum() > 0",
            f"({a} > 0.5).any()",
            f"{a}.mean().item() < 0.25",
            f"bool({a}.max() > 1)",
            f"{a}.requires_grad",
            f"{a}.dtype == torch.float64",
        ]
    )
    then, full1 = d.nested(name)
    other, full2 = d.nested(name)
    d.define(name, full1 and full2)
    return [f"if {cond}:", *_indent(then), "else:", *_indent(other)]


def _if_shape(d: Drawer) -> list[str]:
    name = d.new()
    cond = d.rng.choice(
        [
            "x.shape[0] > 3",
            "y.size(1) % 2 == 0",
            "len(rest) > 0",
            "flag",
            "scale > 0.6",
            "MOD.use_relu",
            "GSCALE > 1",
            "x.numel() > 12",
            "not x.requires_grad",
        ]
    )
    then, full1 = d.nested(name)
    if d.rng.random() < 0.3:
        start = d.pick()
        d.define(name, full1 and start in d.full)
        return [f"{name} = {start}", f"if {cond}:", *_indent(then)]
    other, full2 = d.nested(name)
    d.define(name, full1 and full2)
    return [f"if {cond}:", *_indent(then), "else:", *_indent(other)]


def _loop(d: Drawer) -> list[str]:
    name = d.new()
    start = d.pick()
    a, b = d.pick(), d.pick()
    full = start in d.full or a in d.full
    choice = d.rng.randrange(6)
    head = [f"{name} = {start}"]
    if choice == 0:
        loop = [f"for i in range({d.rng.randint(1, 3)}):", f"    {name} = {name} * 0.5 + {a} * i"]
    elif choice == 1:
        loop = ["for i in range(x.shape[0] % 3 + 1):", f"    {name} = {name} + {a}.sin()"]
    elif choice == 2:
        loop = [f"for t in [{a}, {b}]:", f"    {name} = {name} * t"]
        full = full or b in d.full
    elif choice == 3:
        loop = ["for i, t in enumerate(rest):", f"    {name} = {name} + t * (i + 1)"]
        full = start in d.full
    elif choice == 4:
        loop = [
            "i = 0",
            f"while i < {d.rng.randint(1, 3)}:",
            f"    {name} = {name} - {a} / (i + 2)",
            "    i += 1",
        ]
    else:
        loop = [
            "i = 0",
            f"while {name}.abs().sum() > 1 and i < 3:",
            f"    {name} = {name} * 0.5",
            "    i += 1",
        ]
        full = start in d.full
    d.define(name, full)
    return head + loop


def _containers(d: Drawer) -> list[str]:
    name = d.new()
    a, b, c = d.pick(), d.pick(), d.pick()
    full = a in d.full or b in d.full or c in d.full
    choice = d.rng.randrange(8)
    lst = d.new("l")
    if choice == 0:
        lines = [
            f"{lst} = [{a}, {b}]",
            f"{lst}.append({c})",
            f"{lst}.insert(0, {b} * 2)",
            f"{name} = {lst}[0] * {lst}[-1] + len({lst})",
        ]
        full = b in d.full or c in d.full
    elif choice == 1:
        lines = [f"p, q = {a}, {b}", "p, q = q, p", f"{name} = p - q"]
        full = a in d.full or b in d.full
    elif choice == 2:
        lines = [
            f'{lst} = {{"u": {a}, "w": {b}}}',
            f'{lst}["k"] = {c}',
            f'{name} = {lst}["u"] + {lst}.get("missing", {lst}["w"]) * len({lst})',
        ]
        full = a in d.full or b in d.full
    elif choice == 3:
        lines = [f"{name} = sum([t * 2 for t in ({a}, {b}, {c})])"]
        if a in d.full and b in d.full and c in d.full:
            lines = [
                f"{name} = torch.stack([t * 2 for t in ({a}, {b}, {c}) if t.dim() > 0]).sum(0)"
            ]
    elif choice == 4:
        lines = [
            f"first, *others = [{a}, {b}, {c}, *rest]",
            f"{name} = first + len(others)",
        ]
        full = a in d.full
    elif choice == 5:
        lines = [
            f"{lst} = {{k: t.sum() for k, t in zip('abc', ({a}, {b}, {c}))}}",
            f"{name} = {a} * {lst}['b'] + {lst}['c']",
        ]
        full = a in d.full
    elif choice == 6:
        lines = [
            f"{lst} = [{a}, {b}]",
            f"{lst}.extend(rest)",
            f"{lst}.pop()",
            f"{name} = {lst}[0] + len({lst})",
        ]
        full = a in d.full
    else:
        lines = [f"{name} = sum(t.mean() for t in ({a}, {b})) + {c}"]
        full = c in d.full
    d.define(name, full)
    return lines


def _closure(d: Drawer) -> list[str]:
    name = d.new()
    a, b, c = d.pick(), d.pick(), d.pick()
    choice = d.rng.randrange(4)
    if choice == 0:
        lines = [
            "def inner(t, k=2.0):",
            f"    return t * k + {a}",
            f"{name} = inner({b}) + inner({c}, k=0.5)",
        ]
        full = a in d.full or b in d.full or c in d.full
    elif choice == 1:
        lines = [f"fn = lambda t: t.relu() + {a}", f"{name} = fn({b})"]
        full = a in d.full or b in d.full
    elif choice == 2:
        acc = d.new("acc")
        lines = [
            f"{acc} = {a}",
            "def bump(t):",
            f"    nonlocal {acc}",
            f"    {acc} = {acc} + t",
            f"    return {acc}",
            f"bump({b})",
            f"bump({c})",
            f"{name} = {acc}",
        ]
        full = a in d.full or b in d.full or c in d.full
    else:
        lines = [
            "def make(k):",
            "    def scaled(t):",
            "        return t * k",
            "    return scaled",
            f"{name} = make({d.number()})({a}) + make(2)({b})",
        ]
        full = a in d.full or b in d.full
    d.define(name, full)
    return lines


def _globals(d: Drawer) -> list[str]:
    name = d.new()
    a = d.pick()
    choice = d.rng.randrange(5)
    if choice == 0:
        lines = ["COUNTER += 1", f"{name} = {a} + COUNTER"]
    elif choice == 1:
        lines = ["STATE.append(len(rest) + x.shape[0])", f"{name} = {a} * len(STATE)"]
    elif choice == 2:
        lines = [f'TABLE["t"] = {a} * 2', f'{name} = TABLE["t"] + 1']
    elif choice == 3:
        lines = [f"GT = {a}.detach().sum()", f"{name} = {a} * GT"]
    else:
        lines = [f"STATE.append({a}.detach() + 1)", f"{name} = {a} - STATE[-1]"]
    d.define(name, a in d.full)
    return lines


def _inplace(d: Drawer) -> list[str]:
    name = d.new()
    a = d.pick()
    choice = d.rng.randrange(12)
    if choice == 0:
        return [f"z.add_({a})"]
    if choice == 1:
        return ["z[0].mul_(2)"]
    if choice == 2:
        return ["z[:, 1:].add_(1)"]
    if choice == 3:
        return ["z.view(-1)[:3].fill_(0.5)"]
    if choice == 4:
        return ["z[z > 0] = 0.0"]
    if choice == 5:
        return ["z.t()[0].clamp_(min=-0.5)"]
    if choice == 6:
        return ["with torch.no_grad():", f"    {d.rng.choice(['x', 'y'])}.mul_(0.5)"]
    if choice == 7:
        d.define(name, True)
        return [f"{name} = x * 1", f"{name}.add_({a})", f"{name}[0] = 0.0"]
    if choice == 8:
        d.define(name, True)
        return [f"{name} = y.clone()", f"{name}[:, 0] *= 2", f"{name} += {a}"]
    if choice == 9:
        d.define(name, True)
        return [f"{name} = x + 0", f"{name}[{name} > 1] = 1.0"]
    if choice == 10:
        return ["z.copy_(z.flip(0))"]
    return [f"z.sub_({a}.detach() * 0.5)"]


def _grad_mode(d: Drawer) -> list[str]:
    name = d.new()
    expr, full = d.expression()
    choice = d.rng.randrange(4)
    d.define(name, full)
    if choice == 0:
        return ["with torch.no_grad():", f"    {name} = {expr}"]
    if choice == 1:
        inner, full2 = d.expression()
        return [
            "with torch.no_grad():",
            "    with torch.enable_grad():",
            f"        {name} = {expr}",
            f"    {name} = {name} + {inner}",
        ]
    if choice == 2:
        return ["with torch.set_grad_enabled(flag):", f"    {name} = {expr}"]
    return [f"{name} = ({expr}).detach()"]


def _try(d: Drawer) -> list[str]:
    name = d.new()
    a, b = d.pick(), d.pick()
    full = a in d.full or b in d.full
    choice = d.rng.randrange(4)
    c = d.pick(full=True)
    d.define(name, full)
    if choice == 0:
        return [
            "try:",
            f"    {name} = {a} + {b}",
            "    if flag:",
            '        raise ValueError("boom")',
            "except ValueError:",
            f"    {name} = {a} - {b}",
        ]
    if choice == 1:
        return [
            "try:",
            f'    {name} = {{"k": {a}}}["missing"]',
            "except KeyError:",
            f"    {name} = {a} * 3 + {b}",
        ]
    if choice == 2:
        d.full.add(name)
        return [
            "try:",
            f"    {name} = ({c} @ {c}) * 0.1",
            "except RuntimeError:",
            f"    {name} = {c} * 0.1",
        ]
    return [
        "try:",
        f"    {name} = {a} * 2",
        "finally:",
        f"    {name} = {name} + {b}",
    ]


def _module(d: Drawer) -> list[str]:
    name = d.new()
    a = d.pick()
    choice = d.rng.randrange(4)
    d.define(name, a in d.full)
    if choice == 0:
        return [f"{name} = MOD({a}) + MOD.alpha"]
    if choice == 1:
        return [f"{name} = MOD.extra({a}, k={d.rng.choice([1, 3])})"]
    if choice == 2:
        return [f"{name} = MOD.extra({a}) * MOD.calls"]
    return [f"{name} = helper({a}, *[{d.rng.choice(['0.5', 'scale'])}], bias=GSCALE)"]


def _call_forms(d: Drawer) -> list[str]:
    name = d.new()
    a, b = d.pick(), d.pick()
    full = a in d.full or b in d.full
    choice = d.rng.randrange(4)
    d.define(name, full)
    if choice == 0:
        return [f"{name} = helper({a}, 0.5, {b}, bias=1.0)"]
    if choice == 1:
        return [f"{name} = helper({a}, scale, *rest) + {b}"]
    if choice == 2:
        return [f"kw = {{'bias': {d.number()}}}", f"{name} = helper({a}, **kw) * {b}"]
    return [f"args = ({a}, 2.0, {b})", f"{name} = helper(*args)"]


_BREAKS = (
    'print("in", len(rest), file=SINK)',
    "torch._dynamo.graph_break()",
    "STATE.append(disabled_helper(x, 2).shape[0])",
)


def _nested_break(d: Drawer) -> list[str]:
    """A graph break inside a loop, a grad-mode block, a try block or an inlined function: the
    resume function must rebuild the loop's, block's or caller's state."""
    name = d.new()
    a, b = d.pick(), d.pick()
    brk = d.rng.choice(_BREAKS)
    full = a in d.full or b in d.full
    choice = d.rng.randrange(13)
    d.define(name, full)
    if choice == 0:
        return [f"{name} = {a}", f"for t in [{b}, {a}]:", f"    {brk}", f"    {name} = {name} + t"]
    if choice == 8:  # a break inside a comprehension (its own function before 3.12)
        return [
            f"parts = [(print('c', file=SINK), t * 2)[1] for t in ({a}, {b})]",
            f"{name} = parts[0] + parts[1]",
        ]
    if choice == 9:  # an inlined function that breaks, called in a loop
        return [
            "def step(t):",
            f"    {brk}",
            "    return t * 0.5",
            f"{name} = {a}",
            f"for t in ({a}, {b}):",
            f"    {name} = {name} + step(t)",
        ]
    if choice == 10:
        return [
            f"{name} = {a} * 1",
            f'for k, t in {{"p": {a}, "q": {b}}}.items():',
            f"    {brk}",
            f"    {name} = {name} + t * len(k)",
        ]
    if choice == 11:
        return [
            f"{name} = {a}",
            "for i in range(2):",
            "    with torch.no_grad():",
            f"        {name} = {name} + {b} * i",
            f"        {brk}",
            f"    {name} = {name} * 2",
        ]
    if choice == 12:
        return [
            f"{name} = {a} * 1",
            "i = 0",
            f"while ({name}.abs().sum() > 0.5) and i < 2:",
            f"    {brk}",
            f"    {name} = {name} * 0.5 + {b}",
            "    i += 1",
        ]
    if choice == 1:
        return [
            f"{name} = {a} * 1",
            f"for i in range({d.rng.randint(1, 3)}):",
            f"    {name} = {name} * 0.5",
            "    if i == 1:",
            f"        {brk}",
            f"    {name} = {name} + {b}",
        ]
    if choice == 2:
        return [
            "with torch.no_grad():",
            f"    {name} = {a} * 2",
            f"    {brk}",
            f"    {name} = {name} + {b}",
        ]
    if choice == 3:
        return [
            "try:",
            f"    {name} = {a} + 1",
            f"    {brk}",
            f"    {name} = {name} * {b}",
            "except KeyError:",
            f"    {name} = {a}",
        ]
    if choice == 4:
        return [
            "def piece(t, k=1.0):",
            "    u = t * k",
            f"    {brk}",
            "    return u + 1",
            f"{name} = piece({a}, k=scale) + piece({b})",
        ]
    if choice == 5:
        lst = d.new("l")
        return [
            f"{lst} = [{a}]",
            f"{brk}",
            f"{lst}.append({b})",
            f"{name} = {lst}[0] * {lst}[-1]",
        ]
    if choice == 6:
        return [
            "with torch.enable_grad():",
            f"    {name} = {a} - {b}",
            f"    f0 = {name}.sum().item()",
            f"    {name} = {name} * (2.0 if f0 > 0 else 0.5)",
        ]
    return [
        f"{name} = {a}",
        "i = 0",
        "while i < 2:",
        f"    {name} = {name} + {b} * i",
        f"    {brk}",
        "    i += 1",
    ]


def _python_values(d: Drawer) -> list[str]:
    """Python-level work on sizes, names and objects around tensors: it is specialised or
    guarded, never traced."""
    name = d.new()
    a, b = d.pick(), d.pick()
    full = a in d.full or b in d.full
    choice = d.rng.randrange(9)
    d.define(name, full)
    if choice == 0:
        return [f"print(tuple({a}.shape), {b}.dtype == torch.float64, file=SINK)",
                f"{name} = {a} + {b}"]  # fmt: skip
    if choice == 1:
        return [f"{name} = {a} * getattr(MOD, 'alpha') + (1 if hasattr(MOD, 'calls') else 0) * {b}"]
    if choice == 2:
        return [f"{name} = {a} if isinstance({b}, torch.Tensor) else {b}", f"{name} = {name} + {b}"]
    if choice == 3:
        return [
            f"sizes = sorted([{a}.dim(), x.shape[0], len(rest)], reverse=True)",
            f"{name} = {a} * sizes[0] + {b} * min(sizes)",
        ]
    if choice == 4:
        return ["if (n := x.shape[0]) > 2:", f"    {name} = {a} * n + {b}", "else:",
                f"    {name} = {a} - {b}"]  # fmt: skip
    if choice == 5:
        return [f"{name} = no_grad_helper({a}) + {b}"]
    if choice == 6:
        return [
            "try:",
            f"    {name} = raising_helper({a}, 3) * {b}",
            "except ValueError as err:",
            f"    {name} = {a} * len(str(err)) + {b}",
        ]
    if choice == 7:
        return [
            f"pairs = list(zip(*[({a}, 1), ({b}, 2)]))",
            f"{name} = pairs[0][0] * pairs[1][1] + {b}",
        ]
    tmp = d.new("t")
    return [f"{tmp} = {a} * 2", f"{name} = {tmp} + {b}", f"del {tmp}"]


# name -> (drawer, weight, is compound)
_STATEMENTS = {
    "assign": (_assign, 6, False),
    "graph_break": (_graph_break, 3, False),
    "nested_break": (_nested_break, 2.5, False),
    "if_values": (_if_values, 2, True),
    "if_shape": (_if_shape, 2, True),
    "loop": (_loop, 2, False),
    "containers": (_containers, 2, False),
    "closure": (_closure, 1.5, False),
    "globals": (_globals, 1.5, False),
    "inplace": (_inplace, 2.5, False),
    "grad_mode": (_grad_mode, 1.5, False),
    "try": (_try, 1.5, False),
    "module": (_module, 1.5, False),
    "call_forms": (_call_forms, 1.5, False),
    "python_values": (_python_values, 2, False),
}
