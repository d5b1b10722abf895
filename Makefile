# subst: `make run` optimizes a bundled model; `make test` runs the whole suite. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
MODEL  ?= models/bert_tiny.onnx

.PHONY: setup run test test-full lint models zoo zoo-update store rulecache clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "subst needs Python 3.11+, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

# The run reads the shipped store (read-only); the costs it measures on this machine are cached per user
# ($XDG_CACHE_HOME/subst/costs.db, else ~/.cache/subst/costs.db).
run: setup
	@mkdir -p build
	$(BIN)/subst info $(MODEL)
	@echo
	$(BIN)/subst optimize $(MODEL) -o build/$(notdir $(MODEL:.onnx=.opt.onnx)) --dim batch=1 --dim seq=32

# Two workers, one test module each at a time (a module's fixtures, such as the zoo run, are made once): most
# checks are single-threaded, so on CI's two cores the suite takes about 9 minutes instead of 13. The slow checks
# run in a bounded form (tests/conftest.py's `bounded`); `make test-full` runs them whole (SUBST_FULL=1). Each
# worker's numpy runs one BLAS thread: two workers fill the two cores, and BLAS threads beside them only wait.
test: setup
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadscope

test-full: setup
	OPENBLAS_NUM_THREADS=1 SUBST_FULL=1 $(BIN)/python -m pytest -q -n 2 --dist loadscope

lint: setup
	$(BIN)/ruff check .

models: setup
	$(BIN)/python models/build.py

# The regression over the hand-built zoo (models/build.py) and the corpus of real exporter output
# (models/corpus/, re-exported by models/export_corpus.py on a machine with torch): a table, exit 1 on a regression.
zoo: setup
	$(BIN)/python models/regress.py

zoo-update: setup
	$(BIN)/python models/regress.py --update

# The shipped store from nothing: TASO's op set with biased convs to 3 ops; then every pool in specs/pools/ in
# name order (each file says what it finds: Softmax, LayerNorm and reductions moved through their neighbours,
# the 4-op sibling merges of biased convs, a Split concatenated back as its input, Relu moved across a Split of
# a merged conv's output, a transformer's projections as Gemm, views and selections moved through their
# neighbours; specs/pools/unshipped/ is left out); then the spellings generated toward STORE_TARGETS (specs/targets.toml,
# `subst generate --target`: softmax, the GELU family, the four norms and attention, each spelling paired with its op and
# proved); then
# the hand-written rules (BatchNorm folded into its Conv, Mul/Add folded into a BatchNorm, grouped convs made
# plain, Relus moved after a Concat or a MaxPool, a Split's bias Adds made one, a product by a reciprocal made a
# quotient, onnxruntime's fused kernels); then a verdict for every rule (a few minutes on 2 cores). Attention's
# spellings as MultiHeadAttention are targets too (the attention_* of specs/targets.toml but the scaled-once one,
# which pairs nothing: its 1/8 is not the op's float32(sqrt(s)) squared), no longer written by hand.
STORE_TARGETS = softmax softmax_attention gelu gelu_tanh quickgelu biasgelu fastgelu layernorm rmsnorm skip_layernorm skip_rmsnorm attention_ts attention_ts_scaled attention_split attention_split_scaled attention_dynamo attention_dynamo_scaled attention_ts_masked attention_dynamo_masked attention_split_kt_seq_first_scaled attention_split_scaled_per_operand attention_split_kt_seq_first_scaled_per_operand
store: setup
	rm -f build/new-store.db
	@mkdir -p build
	$(BIN)/subst generate --ops +bias --store build/new-store.db
	for pool in $(sort $(wildcard specs/pools/*.toml)); do $(BIN)/subst generate --config $$pool --store build/new-store.db || exit 1; done
	for t in $(STORE_TARGETS); do $(BIN)/subst generate --target $$t --store build/new-store.db || exit 1; done
	$(BIN)/subst rules add specs/rules/*.rules --store build/new-store.db
	$(BIN)/subst verify --store build/new-store.db
	mv build/new-store.db substitutions.db
	$(MAKE) rulecache

# The shipped store's rules, parsed and lifted for the search (taso/search/rulecache.json, package data),
# so that a cold run reads them instead of building them (~16 s on the 2-core machine), and the shipped specs'
# digests that proofs are trusted by (taso/verify/basis.json, ~2 s), and the digests of the store's proofs, of
# its proved rows as stored and of the catalogue entries they use, that the package pins
# (taso/rules/shipped_proofs.json: its proofs are trusted with no user's key, and a run on those rows takes no
# binding again; every binding is taken here, and a store with one that does not match is refused, ~9 s). A run
# uses each only while it is current: run this after changing the store, the specs, a catalogue entry or the
# code that shapes them (taso/search/rulecache.py's CODE, taso/verify/basis.py's files_key);
# tests/test_rulecache.py, tests/test_provenance.py and tests/test_trust*.py say when it is due. After a change
# to the verifier's code (taso/rules/provenance.py's VERIFIER_CODE) verify a copy of the store again first
# (`subst verify --force`).
rulecache: setup
	$(BIN)/python -c 'from taso.rules import store; from taso.search import rulecache; rulecache.ship(store.open_store(store.DEFAULT_PATH))'
	$(BIN)/python -c 'from taso.rules import provenance; from taso.verify import basis; basis.ship(provenance.SPECS_DIR)'
	$(BIN)/python -c 'from taso.rules import provenance, store; provenance.pin(store.open_store(store.DEFAULT_PATH))'

clean:
	rm -rf build .pytest_cache
