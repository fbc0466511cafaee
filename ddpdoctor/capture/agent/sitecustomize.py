# Copied by `ddpdoctor run` into a private folder prepended to PYTHONPATH, beside the agent folder.  It activates
# ddpdoctor's capture agent in training ranks only, then chains to the sitecustomize that
# would have been imported without it.  Never raises: a capture problem must not stop the
# user's program.
def _ddpdoctor_bootstrap():
    import os
    import sys

    env = os.environ
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        if env.get("DDPDOCTOR_BUNDLE") and env.get("DDPDOCTOR_AGENT") and "ddpdoctor_capture_agent" not in sys.modules:
            import importlib
            import importlib.util

            folder = env["DDPDOCTOR_AGENT"]  # the agent folder, loaded as a package by path
            spec = importlib.util.spec_from_file_location(
                "ddpdoctor_capture_agent", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
            )
            package = importlib.util.module_from_spec(spec)
            sys.modules[package.__name__] = package
            spec.loader.exec_module(package)
            importlib.import_module(package.CORE).maybe_activate()
    except Exception as exc:
        try:
            sys.stderr.write(f"ddpdoctor: capture disabled in pid {os.getpid()}: {type(exc).__name__}: {exc}\n")
        except Exception:
            pass
    # chain to the next sitecustomize on sys.path, if any
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec

        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            mod = module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
    except Exception:
        import traceback

        traceback.print_exc()


_ddpdoctor_bootstrap()
del _ddpdoctor_bootstrap
