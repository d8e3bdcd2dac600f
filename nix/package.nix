# hermesd and hermesctl, built from pyproject.toml.
{ lib, python3Packages }:

python3Packages.buildPythonApplication {
  pname = "hermesd";
  version = "0.1.0";
  pyproject = true;
  src = lib.cleanSource ../.;

  build-system = [ python3Packages.setuptools python3Packages.wheel ];
  dependencies = with python3Packages; [ pyyaml openai msgpack systemd python-dotenv ];

  # The test suite starts daemons on Unix sockets and needs systemd tools; it runs in CI.
  doCheck = false;
  pythonImportsCheck = [ "hermesd.daemon" "hermesctl.cli" ];

  meta = {
    description = "Hermes-compatible AI agent daemon with a msgpack-RPC Unix socket";
    license = lib.licenses.mit;
    mainProgram = "hermesd";
    platforms = lib.platforms.linux;
  };
}
