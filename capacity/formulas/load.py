"""The load a sizing takes, from what customers count: users and their requests a day."""

from __future__ import annotations

from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f

#: Seconds in an hour [s].
SECONDS_PER_HOUR = 3600.0


def peak_hour_rate_rps(daily_users: ArrayLike, requests_per_user_per_day: ArrayLike,
                       peak_hour_share: ArrayLike):
    """Arrival rate in the busiest hour from daily users [requests/s].

    ``λ = U r s / 3600``: ``U`` daily active users [users], ``r`` requests each makes a day [requests/user/day],
    ``s`` the share of a day's requests that falls in the peak hour [-] (0.1: a tenth of the day's traffic in one
    hour, 2.4 times the daily average), spread evenly over that hour's 3,600 s. Issue 30's example: 500 daily users
    with 20 requests each, 10% in the peak hour: 500 x 20 x 0.1 / 3,600 = 0.278 requests/s. The usual planning
    rule (the busy hour of telephone traffic engineering; e.g. ITU-T E.500, *Traffic intensity measurement
    principles*): size for the busiest hour, not the daily mean.
    """
    return _f(daily_users) * _f(requests_per_user_per_day) * _f(peak_hour_share) / SECONDS_PER_HOUR


__all__ = ["SECONDS_PER_HOUR", "peak_hour_rate_rps"]
