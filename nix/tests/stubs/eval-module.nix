# Evaluate nix/module.nix with nixpkgs' real module system, as tests/nix/test_module.py does:
#   nix-instantiate --eval --strict --json nix/tests/stubs/eval-module.nix \
#     --arg lib 'import /path/to/nixpkgs/lib' \
#     --arg configuration '{ services.hermes-agent.enable = true; }' -A config.systemd
# `lib` is the real one (tests/nix find it through NIXPKGS_LIB or <nixpkgs/lib>); only the NixOS
# options the module defines (./nixos.nix) and the packages (./pkgs.nix) are stand-ins.
# `failedAssertions` lists the messages of the assertions that do not hold.
{
  lib,
  configuration ? { },
  system ? "x86_64-linux",
}:
let
  pkgs = import ./pkgs.nix { inherit lib system; };
  evaluated = lib.evalModules {
    class = "nixos";
    modules = [
      ./nixos.nix
      ../../module.nix
      configuration
      # As nixpkgs.nix hands it to every NixOS module (not a specialArg: `imports` cannot use it).
      { _module.args.pkgs = pkgs; }
    ];
  };
  cfg = evaluated.config;
in
evaluated
// {
  inherit lib pkgs;
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  inherit (cfg) warnings;
}
