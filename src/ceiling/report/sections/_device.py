"""The target device as the report's decode and serving sections give it to their `ceiling.*`
call: the report's --spec, else its --profile when that names a catalog GPU (as the
commands take `--profile`), else the demo device."""

from __future__ import annotations

from ceiling.report.work import DEMO_DEVICE, Choice, ReportOptions


def device_arguments(w: ReportOptions) -> tuple[dict, object, Choice]:
    """(the call's device arguments, the resolved device, whether it is the user's)."""
    resolved, device = w.cluster_device()
    if w.spec is not None:
        return {"spec": w.spec}, resolved, device
    if w.profile is not None and not device.demo:
        return {"machine_profile": w.profile}, resolved, device
    return {"spec": DEMO_DEVICE}, resolved, device


def on_fewest(call, tps):
    """`call(tp)`'s result on the fewest devices of `tps` it answers for, else its refusal
    (the CeilingError) on the most."""
    from ceiling.errors import CeilingError

    refusal = None
    for tp in tps:
        try:
            return call(tp)
        except CeilingError as exc:
            refusal = exc
    return refusal
