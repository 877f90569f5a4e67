#!/usr/bin/env python3
"""Static instruction counts of the kernels in a CUDA cubin (sm_70 and later: 16 bytes an
instruction), without the toolkit's disassembler (cuobjdump and nvdisasm are not in the CUDA
Debian install here). A kernel's .text section holds its machine code; its size over 16 is its
instruction count, padding at the end included.

    scripts/sass_count.py FILE.cubin [SUBSTRING]     one line per kernel: count, name

What it is for: comparing two versions of a kernel on a machine without a GPU. Where a
kernel is straight-line code (loops unrolled to compile-time bounds, the bottom-edge path
removed), its count is close to what one thread runs; scripts/sass_probe.sh builds such
probes of the decode line kernel. With --opcodes it also prints how often each opcode field
(the low 12 bits of an instruction) occurs, to tell which kinds of instruction a change
removed: the names of those codes are not published."""
import collections
import struct
import subprocess
import sys


def sections(path):
    data = open(path, 'rb').read()
    if data[:4] != b'\x7fELF' or data[4] != 2:
        sys.exit(f'sass_count.py: {path} is not a 64-bit ELF file (a cubin)')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    headers = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for h in headers:
        name = data[names + h[0]:data.index(b'\0', names + h[0])].decode()
        yield name, data[h[4]:h[4] + h[5]]


def demangle(symbol):
    try:
        return subprocess.run(['c++filt', symbol], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return symbol


def main(argv):
    args = [a for a in argv if a != '--opcodes']
    if not args or args[0] in ('-h', '--help'):
        print(__doc__)
        return 0 if args else 2
    needle = args[1] if len(args) > 1 else ''
    for name, code in sections(args[0]):
        if not name.startswith('.text.'):
            continue
        kernel = demangle(name[len('.text.'):])
        if needle not in kernel:
            continue
        print(f'{len(code) // 16:7d}  {kernel}')
        if '--opcodes' in argv:
            ops = collections.Counter(struct.unpack_from('<Q', code, i)[0] & 0xfff
                                      for i in range(0, len(code), 16))
            print('         ' + ' '.join(f'{op:03x}:{n}' for op, n in ops.most_common()))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
