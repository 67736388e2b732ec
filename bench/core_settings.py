"""`python -m bench sockets --layer core`: the portal's settings with channels-redis's core
layer (one Redis list push per socket per group event) instead of the pub/sub layer the
settings use, to compare the two."""

from portal.settings import *  # noqa: F403
from portal.settings import REDIS_URL, STREAMGATE_NAMESPACE, channel_layers

# The same hosts and prefix as the settings' own layer: only the backend differs.
CHANNEL_LAYERS = channel_layers(REDIS_URL, f"{STREAMGATE_NAMESPACE}asgi")
CHANNEL_LAYERS["default"]["BACKEND"] = "channels_redis.core.RedisChannelLayer"
