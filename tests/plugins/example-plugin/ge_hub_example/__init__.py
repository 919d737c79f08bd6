"""An example third-party ge-hub plugin (installed by ge-hub's tests with pip)."""
