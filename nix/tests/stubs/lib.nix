# A stand-in for nixpkgs' `lib`, for evaluating nix/module.nix, nix/package.nix and flake.nix on a
# machine without nixpkgs (tests/test_nix_module.py, tests/test_nix_flake.py).
#
# It implements only what those files use, with the semantics of the real functions: option
# declarations and types that check and merge definitions, mkIf/mkMerge/mkOverride pushed down
# to the options they define (so a module may read its own options under `mkIf cfg.enable`),
# priorities, defaults, and a small `evalModules`. Anything else is missing on purpose: a new
# lib function used by the module should fail these tests until it is added here.
let
  inherit (builtins)
    all any attrNames concatLists concatMap concatStringsSep elem elemAt filter foldl' genList
    head isAttrs isBool isFunction isInt isList isPath isString length listToAttrs map match
    replaceStrings stringLength substring tail typeOf;

  lib = rec {
    # --- lists, strings, attribute sets ---------------------------------------------------------
    inherit head tail all any elem filter concatMap concatLists concatStringsSep;
    optional = cond: x: if cond then [ x ] else [ ];
    optionals = cond: xs: if cond then xs else [ ];
    optionalString = cond: s: if cond then s else "";
    optionalAttrs = cond: as: if cond then as else { };
    unique = foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];
    concatMapStringsSep = sep: f: xs: concatStringsSep sep (map f xs);
    hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;
    hasSuffix =
      suffix: s:
      let
        ls = stringLength s;
        lx = stringLength suffix;
      in
      ls >= lx && substring (ls - lx) lx s == suffix;
    removePrefix =
      prefix: s:
      if hasPrefix prefix s then substring (stringLength prefix) (stringLength s) s else s;
    escapeShellArg = arg: "'${replaceStrings [ "'" ] [ "'\\''" ] (toString arg)}'";
    escapeShellArgs = xs: concatStringsSep " " (map escapeShellArg xs);
    genAttrs = names: f: listToAttrs (map (n: { name = n; value = f n; }) names);
    mapAttrs = builtins.mapAttrs;
    filterAttrs =
      pred: set:
      listToAttrs (
        concatMap (n: if pred n set.${n} then [ { name = n; value = set.${n}; } ] else [ ]) (attrNames set)
      );
    attrValues = builtins.attrValues;
    isDerivation = v: isAttrs v && (v.type or null) == "derivation";
    isFunction = builtins.isFunction;
    toList = x: if isList x then x else [ x ];
    recursiveUpdate =
      a: b:
      a
      // builtins.mapAttrs (
        n: v: if isAttrs v && a ? ${n} && isAttrs a.${n} && !isDerivation v then recursiveUpdate a.${n} v else v
      ) b;

    # --- sources and meta (package.nix) ---------------------------------------------------------
    # Not copied: the stub package never puts `src` into its derivation.
    cleanSourceWith = { src, filter ? (_: _: true), name ? "source" }: src;
    cleanSource = src: src;
    licenses.mit = { shortName = "mit"; };
    platforms.linux = [ "x86_64-linux" "aarch64-linux" ];

    # --- options --------------------------------------------------------------------------------
    mkOption = attrs: { _type = "option"; } // attrs;
    mkEnableOption =
      name:
      mkOption {
        type = types.bool;
        default = false;
        example = true;
        description = "Whether to enable ${name}.";
      };
    literalExpression = text: { _type = "literalExpression"; inherit text; };
    literalMD = text: { _type = "literalMD"; inherit text; };
    isOption = v: isAttrs v && (v._type or null) == "option";

    mkIf = condition: content: { _type = "if"; inherit condition content; };
    mkMerge = contents: { _type = "merge"; inherit contents; };
    mkOverride = priority: content: { _type = "override"; inherit priority content; };
    mkDefault = mkOverride 1000;
    mkForce = mkOverride 50;

    # --- types: check and merge as nixpkgs' do ----------------------------------------------------
    mergeEqualOption =
      loc: defs:
      let
        first = (head defs).value;
      in
      if all (d: d.value == first) defs then
        first
      else
        throw "The option `${concatStringsSep "." loc}' has conflicting definition values.";

    mkOptionType =
      { name, description ? name, check ? (_: true), merge ? mergeEqualOption, ... }@attrs:
      { _type = "option-type"; inherit name description check merge; } // attrs;

    types = rec {
      bool = mkOptionType { name = "bool"; check = isBool; };
      int = mkOptionType { name = "int"; check = isInt; };
      str = mkOptionType { name = "str"; check = isString; };
      path = mkOptionType {
        name = "path";
        check = x: isPath x || isDerivation x || (isString x && substring 0 1 x == "/");
      };
      package = mkOptionType {
        name = "package";
        check = x: isDerivation x || (isString x && hasPrefix builtins.storeDir x);
      };
      raw = mkOptionType { name = "raw"; merge = loc: defs: (head defs).value; };
      anything = mkOptionType {
        name = "anything";
        merge =
          loc: defs:
          let
            values = map (d: d.value) defs;
          in
          if all (v: isAttrs v && !isDerivation v) values then
            builtins.mapAttrs (n: _: anything.merge (loc ++ [ n ]) (concatMap (v: if v ? ${n} then [ { value = v.${n}; } ] else [ ]) values))
              (foldl' (a: v: a // v) { } values)
          else if all isList values then
            concatLists values
          else
            mergeEqualOption loc defs;
      };
      strMatching =
        pattern:
        mkOptionType {
          name = "strMatching ${pattern}";
          check = x: isString x && match pattern x != null;
        };
      enum =
        values:
        mkOptionType {
          name = "enum";
          check = x: elem x values;
        };
      nullOr =
        t:
        mkOptionType {
          name = "nullOr ${t.name}";
          check = x: x == null || t.check x;
          merge =
            loc: defs:
            if all (d: d.value == null) defs then
              null
            else if any (d: d.value == null) defs then
              throw "The option `${concatStringsSep "." loc}' is defined both null and not null."
            else
              t.merge loc defs;
        };
      listOf =
        t:
        mkOptionType {
          name = "listOf ${t.name}";
          check = x: isList x && all t.check x;
          merge = loc: defs: concatMap (d: d.value) defs;
        };
      attrsOf =
        t:
        mkOptionType {
          name = "attrsOf ${t.name}";
          check = x: isAttrs x && all t.check (builtins.attrValues x);
          merge =
            loc: defs:
            let
              names = unique (concatMap (d: attrNames d.value) defs);
            in
            genAttrs names (
              n: t.merge (loc ++ [ n ]) (concatMap (d: if d.value ? ${n} then [ { value = d.value.${n}; } ] else [ ]) defs)
            );
        };
      either =
        a: b:
        mkOptionType {
          name = "either ${a.name} ${b.name}";
          check = x: a.check x || b.check x;
          merge =
            loc: defs:
            if all (d: a.check d.value) defs then
              a.merge loc defs
            else if all (d: b.check d.value) defs then
              b.merge loc defs
            else
              throw "The option `${concatStringsSep "." loc}' has definitions of both types.";
        };
      oneOf = ts: foldl' either (head ts) (tail ts);
      functionTo =
        t:
        mkOptionType {
          name = "functionTo ${t.name}";
          check = isFunction;
          merge = loc: defs: args: t.merge loc (map (d: { value = d.value args; }) defs);
        };
      coercedTo =
        from: coerce: to:
        mkOptionType {
          name = "coercedTo ${from.name} ${to.name}";
          check = x: (from.check x && to.check (coerce x)) || to.check x;
          merge =
            loc: defs:
            to.merge loc (map (d: { value = if from.check d.value then coerce d.value else d.value; }) defs);
        };
    };

    # --- evalModules ----------------------------------------------------------------------------
    # Definitions stay trees of mkIf/mkMerge/mkOverride until one path's value is asked for, so
    # reading an option never evaluates conditions guarding other options.
    evalModules =
      { modules, specialArgs ? { } }:
      let
        load =
          m:
          let
            f = if isPath m || isString m then import m else m;
            r = if isFunction f then f ({ inherit config lib; options = declarations; } // specialArgs) else f;
            module =
              if r ? options || r ? config then
                r
              else
                {
                  imports = r.imports or [ ];
                  config = removeAttrs r [ "imports" "_file" "key" "disabledModules" ];
                };
          in
          [ module ] ++ concatMap load (module.imports or [ ]);
        loaded = concatMap load modules;

        mergeDecls =
          a: b:
          if isOption a || isOption b then
            throw "option declared twice"
          else
            a // builtins.mapAttrs (n: v: if a ? ${n} then mergeDecls a.${n} v else v) b;
        declarations = foldl' mergeDecls { } (map (m: m.options or { }) loaded);
        trees = map (m: m.config or { }) loaded;

        declAt =
          path: decl:
          if path == [ ] then decl
          else if isAttrs decl && !(isOption decl) && decl ? ${head path} then declAt (tail path) decl.${head path}
          else null;

        # [ { value, priority, conditions } ] defined at `path` by one tree
        defsAt =
          path: tree: priority: conditions:
          if isAttrs tree && (tree._type or null) == "if" then
            defsAt path tree.content priority (conditions ++ [ tree.condition ])
          else if isAttrs tree && (tree._type or null) == "merge" then
            concatMap (t: defsAt path t priority conditions) tree.contents
          else if isAttrs tree && (tree._type or null) == "override" then
            defsAt path tree.content tree.priority conditions
          else if path == [ ] then
            [ { value = tree; inherit priority conditions; } ]
          else if isAttrs tree && !isDerivation tree && tree ? ${head path} then
            defsAt (tail path) tree.${head path} priority conditions
          else
            [ ];
        allDefs = path: concatMap (t: defsAt path t 100 [ ]) trees;
        activeDefs = path: filter (d: all (c: c) d.conditions) (allDefs path);

        plainAttrs = v: isAttrs v && !isDerivation v && !(v ? _type);
        namesOf = path: unique (concatMap (d: if plainAttrs d.value then attrNames d.value else [ ]) (allDefs path));

        optionValue =
          path: opt:
          let
            loc = concatStringsSep "." path;
            defs = activeDefs path;
            best = foldl' (m: d: if d.priority < m then d.priority else m) 1500 defs;
            chosen =
              if defs == [ ] then
                (if opt ? default then [ { value = opt.default; } ] else throw "The option `${loc}' is used but not defined.")
              else
                filter (d: d.priority == best) defs;
            checked = map (
              d:
              if opt ? type && !(opt.type.check d.value) then
                throw "A definition for option `${loc}' is not of type `${opt.type.name}'."
              else
                d
            ) chosen;
          in
          if opt ? type then opt.type.merge path checked else (head checked).value;

        valueAt =
          path:
          let
            decl = declAt path declarations;
            defs = activeDefs path;
            values = map (d: d.value) defs;
            names = unique ((if isAttrs decl then attrNames decl else [ ]) ++ namesOf path);
            children = genAttrs names (n: valueAt (path ++ [ n ]));
            present = n: declAt (path ++ [ n ]) declarations != null || activeDefs (path ++ [ n ]) != [ ];
          in
          if isOption decl then
            optionValue path decl
          else if decl != null || path == [ ] then
            (if path == [ ] then children else filterAttrs (n: _: present n) children)
          else if values != [ ] && all plainAttrs values then
            filterAttrs (n: _: present n) children
          else if values != [ ] && all isList values then
            concatLists values
          else if values != [ ] then
            mergeEqualOption path (map (v: { value = v; }) values)
          else
            throw "`${concatStringsSep "." path}' has no definition.";

        config = valueAt [ ];
      in
      {
        inherit config;
        options = declarations;
        # Whether anything (an option, or a definition whose conditions hold) is at `path`.
        isDefined = path: declAt path declarations != null || activeDefs path != [ ];
      };
  };
in
lib
