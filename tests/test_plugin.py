from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.trial.unittest import SynchronousTestCase


class PluginTests(SynchronousTestCase):
    def test_plugin_is_found(self) -> None:
        """``twistd rocketpy`` is discoverable through Twisted's plugin system."""
        names = [p.tapname for p in getPlugins(IServiceMaker)]
        self.assertIn("rocketpy", names)
