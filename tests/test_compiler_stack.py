"""``import kiln`` leaves the compiler stack out until it is used (``kiln/_compiler_stack.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import kiln

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=_ROOT)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_kiln_loads_no_compiler_package():
    out = _run(
        "import sys, kiln\n"
        "x = kiln.ones(3) * 2\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['kiln', 'dynamo'], "
        "['kiln', 'aot'], ['kiln', 'inductor'], ['kiln', 'ir'], ['kiln', 'builtin_backends'])))"
    )
    assert out == "[]"


def test_compile_loads_the_stack_and_its_builtin_backends_on_first_use():
    out = _run(
        "import kiln\n"
        "f = kiln.compile(lambda x: x * 2 + 1, backend='eager')\n"
        "print(f(kiln.ones(2)).tolist(), 'inductor' in kiln.backends.list_backends())"
    )
    assert out == "[3.0, 3.0] True"


def test_private_namespaces_are_the_modules_kiln_reads():
    import kiln._dynamo.config as dynamo_config
    import kiln._inductor.config as inductor_config

    import kiln.dynamo.config
    import kiln.inductor.config

    assert dynamo_config is kiln.dynamo.config
    assert inductor_config is kiln.inductor.config
    assert kiln._dynamo is kiln.dynamo
    assert kiln._dynamo.__spec__.name == "kiln.dynamo"
    from kiln._dynamo import exc

    assert exc is sys.modules["kiln.dynamo.exc"]


def test_inductor_config_is_an_attribute_without_importing_it():
    """Scripts set ``torch._inductor.config.<knob>`` right after ``import torch``."""
    out = _run(
        "import kiln\n"
        "kiln._inductor.config.coordinate_descent_tuning = True\n"
        "import kiln.inductor.config as config\n"
        "print(config.coordinate_descent_tuning, kiln._inductor.config is config)"
    )
    assert out == "True True"


def test_facade_names_resolve_lazily():
    assert kiln.compile is kiln.dynamo.compile
    assert kiln.cond is kiln.dynamo.control_flow.cond
    assert kiln.backends.register_backend is kiln.dynamo.backends.register_backend
    assert kiln.export.Dim("n").__name__ == "n"
