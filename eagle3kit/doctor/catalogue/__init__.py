"""The failure catalogue: what users of EAGLE-3 trainers and engines hit, and the doctor's check for each.

``rows``         the one parser of ``failures.md`` (package data; ``docs/failures.md`` is generated from it):
                 ``catalogue_rows``, ``catalogue_frame``, ``demonstrate``
``live``         catalogue rows broken live on the seed replay's draft: forgotten verifier weights, an odd length
``seed_replay``  the seed's attention failure replayed step by step, the doctor's prediction beside each (02)
"""
