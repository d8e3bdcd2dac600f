{
  # A stand-in for nixpkgs with just enough for hermesd's flake to evaluate offline:
  #   nix flake show --override-input nixpkgs path:./nix/tests/stubs
  # (tests/test_nix_flake.py copies both flakes out of the git checkout first).
  description = "stub nixpkgs for hermesd's offline flake tests";

  outputs =
    { self }:
    let
      lib = import ./lib.nix;
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
        system: import ./pkgs.nix { inherit lib system; }
      );
    };
}
