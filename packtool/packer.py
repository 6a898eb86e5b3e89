# temporary: removed once every importer uses packtool.pack
from packtool.pack import *  # noqa: F401,F403
from packtool.pack import MAX_PACK_LEN, OVERFLOWS, PackConfig, PackResult, Pieces, apply_overflow, pack_tokenized, pad_id_of  # noqa: F401
