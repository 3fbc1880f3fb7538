"""hyperplace over HTTP: ``hyperplace serve`` (FastAPI + uvicorn, the ``serve`` extra).

:func:`~hyperplace.service.app.create_app` builds the application; solves run in a pool of
worker processes (:mod:`.pool`, :mod:`.worker`); stored clusters, runs and the latest plan of
every job persist in SQLite (:mod:`.store`); the scheduler extenders are in :mod:`.extender`.
"""
