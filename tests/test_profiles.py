"""The CI profile's once-per-function seeding draws exactly what derandomize draws, without
Hypothesis re-reading the test's source on every call."""

from __future__ import annotations

from types import SimpleNamespace

import hypothesis.core
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_runtime.testing import profiles


def _drawing_test(seen: list):
    @settings(derandomize=True, max_examples=12)
    @given(x=st.integers(), ys=st.lists(st.floats(allow_nan=False), max_size=3))
    def test(x, ys):
        seen.append((x, ys))

    return test


def test_seeding_once_draws_what_derandomize_draws(monkeypatch):
    plain, seeded = [], []
    _drawing_test(plain)()
    fn = _drawing_test(seeded)
    profiles.pytest_collection_modifyitems([SimpleNamespace(obj=fn), SimpleNamespace(obj=None)])
    digests = []
    real = hypothesis.core.function_digest
    monkeypatch.setattr(hypothesis.core, "function_digest", lambda f: digests.append(f) or real(f))
    fn()
    fn()
    assert seeded[: len(plain)] == plain and len(plain) > 1
    assert digests == []  # neither the seed nor the database key was recomputed per call


def test_random_and_explicitly_seeded_tests_are_left_alone():
    @settings(derandomize=False)
    @given(st.integers())
    def randomized(x):
        pass

    @hypothesis.seed(7)
    @settings(derandomize=True)
    @given(st.integers())
    def seeded(x):
        pass

    class Suite:
        @settings(derandomize=True)
        @given(st.integers())
        def test_method(self, x):
            pass

    profiles.pytest_collection_modifyitems([SimpleNamespace(obj=randomized), SimpleNamespace(obj=seeded),
                                            SimpleNamespace(obj=Suite().test_method)])
    assert getattr(randomized, "_hypothesis_internal_use_seed", None) is None
    assert seeded._hypothesis_internal_use_seed == 7
    assert isinstance(Suite.test_method._hypothesis_internal_use_seed, int)  # a method: its function


def test_derandomized_draws_do_not_depend_on_the_modules_imported_before(monkeypatch, tmp_path):
    """A module imported between two runs (as another test in the same worker would) brings
    constants of its own; they must not change a derandomized test's examples."""
    from hypothesis.internal.conjecture import providers

    monkeypatch.setattr(providers, "_get_local_constants", providers._get_local_constants)  # restored after
    profiles._without_local_constants()

    def run() -> list:
        seen: list = []

        @settings(derandomize=True, max_examples=200, database=None)
        @given(st.lists(st.integers(), max_size=8))
        def test(xs):
            seen.append(xs)

        test()
        return seen

    before = run()
    (tmp_path / "constants_mod.py").write_text(
        "".join(f"C{i} = {v}\n" for i, v in enumerate(range(918273645, 918273745))))
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("constants_mod")  # stays in sys.modules: Hypothesis looks for new modules by count
    assert run() == before
