# lit configuration for kimi's FileCheck tests.
import os
import lit.formats

# Paths of the build come from the generated site config, named by ctest.
site_config = lit_config.params.get("kimi_site_config")
if not site_config:
    lit_config.fatal("run the tests through ctest, or pass "
                     "--param kimi_site_config=<build>/test/lit.site.cfg.py")
lit_config.load_config(config, site_config)

config.name = "kimi"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kimi_obj_root, "test")

path = os.pathsep.join([config.kimi_tools_dir, config.llvm_tools_dir,
                        config.environment.get("PATH", "")])
config.environment["PATH"] = path
config.substitutions.append(("%kimi_src_root", config.kimi_src_root))
