"""`python -m bench sockets --layer pubsub`: the portal's settings with channels-redis's pub/sub
layer (one PUBLISH per group event, fanned out to the sockets inside each server process)
instead of the core layer (one list push per socket), to compare the two."""

from portal.settings import *  # noqa: F403
from portal.settings import REDIS_URL, STREAMGATE_NAMESPACE

CHANNEL_LAYERS = {"default": {
    "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
    "CONFIG": {"hosts": [REDIS_URL], "prefix": f"{STREAMGATE_NAMESPACE}asgi"},
}}
