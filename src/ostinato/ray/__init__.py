"""Replay shards on a Ray cluster (``pip install 'ostinato[ray]'``).

:func:`start_shards` starts ``num_shards`` replay servers as Ray actors, one per bundle of a
placement group (spread over the nodes by default), each with the same tables and, optionally,
its own checkpoint directory. The returned :class:`ShardGroup` gives the servers' addresses for
a sharded :class:`ostinato.Client` and builds one with :meth:`ShardGroup.client`.

Example::

    import numpy as np
    import ray
    import ostinato as reverb
    from ostinato.ray import start_shards

    def make_tables():  # runs in each shard actor (Ray ships the function, not Table objects)
        return [reverb.Table("replay", reverb.selectors.Uniform(), reverb.selectors.Fifo(),
                             max_size=1_000_000, rate_limiter=reverb.rate_limiters.MinSize(100))]

    ray.init()
    shards = start_shards(make_tables, num_shards=4, checkpoint_dir="/shared/replay",
                          checkpoint_every_seconds=300)
    client = shards.client()               # == reverb.Client(shards.addresses)
    ...                                    # pass `shards` to Ray tasks/actors: it pickles
    shards.shutdown(checkpoint=True)

Failures: each shard actor is restarted by Ray (``max_restarts``, unlimited by default) in the
same placement-group bundle, hence on the same node, and binds the same port, so its address
does not change; its server restores the newest checkpoint under the shard's directory before it
serves. Clients need nothing: gRPC reconnects, writers resend the items the dead server had not
confirmed (for ``unavailable_timeout`` seconds, 30 by default), and calls made meanwhile retry
until then. Items the old server had confirmed after its last checkpoint are lost; everything
confirmed before that checkpoint started is back. If the node itself is lost, Ray moves the
bundle to another node: the shard then comes back at a new address (and restores only if its
checkpoint directory is on storage that node can read); :meth:`ShardGroup.refresh_addresses`
learns the new address, and clients built after that use it.

``import ostinato.ray`` does not import Ray; the functions here do, when called.
"""

from ostinato.ray.actor import ShardInfo
from ostinato.ray.group import ShardGroup, start_shards

__all__ = ["ShardGroup", "ShardInfo", "start_shards"]
