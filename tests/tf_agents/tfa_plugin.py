"""pytest plugin for running TF-Agents' own tests on Ostinato (``-p tfa_plugin``).

TF-Agents' tests start through ``tf_agents.utils.test_utils.main()``, which enables its
multiprocessing "interactive mode"; under pytest nothing does, so this plugin does it before
any test runs. ``import reverb`` is made to resolve to Ostinato by running pytest through
``python -m ostinato.as_reverb -m pytest``.
"""


def pytest_configure(config):
    from tf_agents.system import system_multiprocessing

    system_multiprocessing.enable_interactive_mode()
