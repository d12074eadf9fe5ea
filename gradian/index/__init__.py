"The gradient index: the store (`gradian.index.store`), reading it (`gradian.index.read`) and building it (`gradian.index.build`)."
