{
  # A stand-in for nixpkgs with just enough for hermesd's flake to evaluate offline:
  #   nix flake show --override-input nixpkgs path:./nix/tests/stubs
  # with nixpkgs' real lib copied to ./lib first (a flake sees only its own files).
  # tests/nix/test_flake.py copies both flakes out of the git checkout and the lib in.
  description = "stub nixpkgs for hermesd's offline flake tests";

  outputs =
    { self }:
    let
      lib = import ./lib;
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
        system: import ./pkgs.nix { inherit lib system; }
      );
    };
}
