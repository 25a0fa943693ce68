"""pytest plugin for running Acme's own tests on Ostinato (``-p acme_plugin``), test-only.

``import reverb`` resolves to Ostinato (:func:`ostinato.install_as_reverb`) before any test
module is imported, so Acme's tests run unmodified from the installed dm-acme wheel.
``launchpad`` is this directory's stand-in (see ``launchpad/__init__.py``).
"""

import ostinato


def pytest_configure(config):
    ostinato.install_as_reverb()
