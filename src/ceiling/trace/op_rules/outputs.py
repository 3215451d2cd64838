"""What a rebuilt op call returns on torch's meta device, from the output rules of each op
family (`arithmetic`, `tensors`, `layers` with `attention` and `norms`)."""

from __future__ import annotations

from ceiling.trace.op_rules.arithmetic import arithmetic_output, softmax_loss_output
from ceiling.trace.op_rules.layers import layer_output
from ceiling.trace.op_rules.meta import NOT_HERE, Meta, Refused, Unsure
from ceiling.trace.op_rules.promotion import can_cast
from ceiling.trace.op_rules.tensors import created_output, view_output


def output(op: str, overload: str, schema, pos, kw, written=()):
    """What the op returns on the meta device, or Refused where its meta kernel raises."""
    dest = [kw.get(schema[i][0]) for i in written if schema[i][4]]
    if dest:  # `out=`: the result lands in the destination, which must fit it already
        if len(dest) != 1 or not isinstance(dest[0], Meta):
            raise Unsure
        result = output(op, overload, schema, pos, {k: v for k, v in kw.items()})
        if not isinstance(result, Meta) or result.shape != dest[0].shape:
            raise Unsure  # torch would resize the destination
        if not can_cast(result.dtype, dest[0].dtype):
            raise Refused
        return dest[0]
    return _result(op, overload, schema, pos, kw)


def _result(op: str, overload: str, schema, pos, kw):
    """What the op returns on the meta device: each family of rules asked in turn."""
    self = pos[0] if pos else None
    for family in (arithmetic_output, created_output, view_output, softmax_loss_output):
        out = family(op, overload, schema, pos, kw, self)
        if out is not NOT_HERE:
            return out
    return layer_output(op, overload, schema, pos, kw, self)
