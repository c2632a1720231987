"""Named keys with limits and usage (``auth.keys``, ``limits``):
docs/operations.md#keys-with-limits.

:mod:`.windows` says what a limit counts and how; :mod:`.store` and :mod:`.redis_store` count it
(this process, or every replica on one Redis); :mod:`.layer` is what the exchange calls;
:mod:`.headers` the rate-limit headers of the answers; :mod:`.usage` ``GET /admin/usage``.
"""

from gateway.limits.layer import Grant, Limits, NamedKey

__all__ = ["Grant", "Limits", "NamedKey"]
