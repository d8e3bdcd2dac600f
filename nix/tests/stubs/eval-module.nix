# Evaluate nix/module.nix with the stand-in lib and pkgs, as tests/test_nix_module.py does:
#   nix-instantiate --eval --strict --json nix/tests/stubs/eval-module.nix \
#     --arg configuration '{ services.hermes-agent.enable = true; }' -A config.systemd
# `failedAssertions` lists the messages of the module's assertions that do not hold.
{
  configuration ? { },
  system ? "x86_64-linux",
}:
let
  lib = import ./lib.nix;
  pkgs = import ./pkgs.nix { inherit lib system; };
  evaluated = lib.evalModules {
    modules = [ ../../module.nix configuration ];
    specialArgs = { inherit pkgs; };
  };
  cfg = evaluated.config;
in
evaluated
// {
  inherit lib pkgs;
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) (cfg.assertions or [ ]));
}
