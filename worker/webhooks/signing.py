"""Standard Webhooks signatures (https://www.standardwebhooks.com).

Each request carries `webhook-id` (the delivery's id: stable across retries, so receivers can
de-duplicate), `webhook-timestamp` (seconds since the epoch, this attempt's) and
`webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, once per active secret
separated by spaces, so during a rotation's grace period both the new and the old secret verify.
The `standardwebhooks` reference library signs; receivers verify with the same library.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import datetime

from standardwebhooks import Webhook

#: Prefix of a signing secret, as the reference libraries expect it.
SECRET_PREFIX = "whsec_"
#: Random bytes per secret (the spec asks for 24 to 64).
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret: `whsec_` and base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signature_header(
    secrets_: Sequence[str], message_id: str, timestamp: datetime, body: str
) -> str:
    """The `webhook-signature` value: one `v1,<signature>` per secret, space-separated."""
    return " ".join(Webhook(s).sign(message_id, timestamp, body) for s in secrets_)


def headers(
    secrets_: Sequence[str], message_id: str, timestamp: datetime, body: str
) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature_header(secrets_, message_id, timestamp, body),
    }
