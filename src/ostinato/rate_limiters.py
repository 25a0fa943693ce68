"""Rate limiters (Reverb's ``reverb.rate_limiters``)."""

from ostinato.core.rate_limiter import MinSize, Queue, RateLimiter, SampleToInsertRatio, Stack

__all__ = ["MinSize", "Queue", "RateLimiter", "SampleToInsertRatio", "Stack"]
