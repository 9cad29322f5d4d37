"""hostfit.fits checks each distinct stack once (a family's runtime and devel images share theirs)
and gives the same fits, misfits and order as checking every image on its own. Pure logic on the
real matrix."""

from __future__ import annotations

import pytest

from imagebuild.deliver import hostfit
from imagebuild.resolve import solver as R
from imagebuild.versions import version_key


HOSTS = [R.Host(driver="535.104.05", gpu="H100"), R.Host(driver="580.95.05", gpu="B200"),
         R.Host(driver="470.82.01", gpu="V100"), R.Host(driver="550.54.15", gpu="GH200"),
         R.Host()]


def _one_by_one(k, specs, host, platform=None):
    """fits() as it was: every image checked on its own."""
    good, bad = [], []
    platform = hostfit.platform_id(k, platform)
    for spec in specs:
        built_for = spec.stack.get("platform")
        if platform and built_for and built_for != platform:
            bad.append(hostfit.Misfit(spec, f"built for {built_for}, the host is {platform}"))
            continue
        res = R.check(k, host, dict(spec.stack), image=True, cuda_from=spec.cuda_from,
                      warnings=False)
        if not res.ok:
            bad.append(hostfit.Misfit(spec, "; ".join(res.explanation[-2:]) or "inconsistent"))
            continue
        mode = res.mode
        good.append(hostfit.Fit(spec=spec, mode=mode.mode if mode else "n/a",
                                detail=mode.text if mode else "no CUDA in the stack",
                                package=mode.package if mode else None,
                                caveat=mode.caveat if mode else None,
                                gpudirect=tuple(res.gpudirect)))
    gpu_host = (host.gpu.lower() != "none") if host.gpu is not None else host.driver is not None
    good.sort(key=lambda f: hostfit.rank_key(k, f, gpu_host))
    return good, bad


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: f"{h.driver}/{h.gpu}")
def test_the_same_fits_as_checking_each_image(k, specs, host):
    assert hostfit.fits(k, specs, host) == _one_by_one(k, specs, host)
    assert hostfit.fits(k, specs, host, "aarch64") == _one_by_one(k, specs, host, "aarch64")


def test_each_distinct_stack_is_checked_once(k, specs, monkeypatch):
    seen = []
    real = hostfit.check

    def counting(k, host, stack, *args, **kw):
        seen.append((tuple(sorted(stack.items())), kw.get("cuda_from")))
        return real(k, host, stack, *args, **kw)

    monkeypatch.setattr(hostfit, "check", counting)
    good, bad = hostfit.fits(k, specs, R.Host(driver="580.95.05", gpu="H100"))
    assert len(good) + len(bad) == len(specs)
    assert len(seen) == len(set(seen)) < len(specs)       # runtime and devel share a check
    assert set(seen) == {(tuple(sorted(s.stack.items())), s.cuda_from) for s in specs}


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: f"{h.driver}/{h.gpu}")
def test_best_is_the_first_fit_with_fewer_checks(k, specs, host, monkeypatch):
    for platform in (None, "x86_64", "aarch64"):
        good, _ = hostfit.fits(k, specs, host, platform)
        for subset in (specs, [s for s in specs if s.stack["pytorch"] != "2.15.0"],
                       [s for s in specs if s.stack["cuda"] == "none"], []):
            want, _ = hostfit.fits(k, subset, host, platform)
            assert hostfit.best(k, subset, host, platform) == (want[0] if want else None)
    calls = []
    real = hostfit.check
    monkeypatch.setattr(hostfit, "check", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    best = hostfit.best(k, specs, host)
    if best is not None and best.spec.stack["pytorch"] == max(
            (s.stack["pytorch"] for s in specs), key=version_key):
        assert len(calls) < len(specs) / 4        # decided by the newest PyTorch's group
