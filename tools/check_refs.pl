#!/usr/bin/env perl
# Fails when a comment or a document names something the tree does not have: a repository path
# (`autograd/offload.h`, `distributed/fsdp.{h,cpp}`, `tests/`), a source file by its bare name
# (`fsdp.cpp`), or a function or type through a project namespace (`reel::autograd::backward`,
# `kernels::unscale_grads_`). Comments and docs drift when code moves; this keeps them honest.
#
#   tools/check_refs.pl [ROOT]      ROOT: a git checkout (default: this one); exit 1 on a stale name
#
# What is read: the comments of the tracked C++/CUDA sources (// and /* */), of shell, CMake and
# Python files (#), and whole Markdown documents. What a name must match:
#   a path      starting with a top-level folder of the tree: a tracked file or a folder holding
#               one; {a,b} alternatives are expanded, and names with <placeholders>, globs or
#               `...` are skipped (they describe a pattern, not a file)
#   a bare file name with a source extension (.h .cpp .cu .cuh .sh .cmake .md .py): the name of a
#               tracked file, unless tools/check_refs.allow lists it (a system or toolkit header)
#   ns::name    with ns one of reel's namespaces: `name` must occur in the code itself (comments and
#               string literals removed) of some tracked source file
use strict;
use warnings;

my $root = shift // do { my $d = `git rev-parse --show-toplevel`; chomp $d; $d };
chdir $root or die "check_refs: cannot enter $root: $!\n";
my @files = split /\0/, `git ls-files -z`;
die "check_refs: $root is not a git checkout with tracked files\n" unless @files;

my (%tracked, %folder, %basename);
for my $f (@files) {
  $tracked{$f} = 1;
  $basename{ (split m{/}, $f)[-1] } = 1;
  my @parts = split m{/}, $f;
  $folder{ join '/', @parts[0 .. $_] } = 1 for 0 .. $#parts - 1;
}
my %top = map { $_ => 1 } grep { $folder{$_} } map { (split m{/}, $_)[0] } @files;

my %allowed;  # bare names that are not ours: system and toolkit headers
if (open my $allow, '<', 'tools/check_refs.allow') {
  while (<$allow>) { s/#.*//; $allowed{$_} = 1 for split ' '; }
}

my $src_ext = qr/\.(?:h|hpp|cpp|cc|cu|cuh)$/;
my $hash_ext = qr/(?:\.sh|\.cmake|\.py|\.in|CMakeLists\.txt|\.ci\/run)$/;
my $skip = qr{^(?:tests/data/|tests/fuzz/corpus/|tools/kernel_resources/testdata/|shared/)};

sub slurp { my ($f) = @_; open my $h, '<', $f or return ''; local $/; return scalar <$h>; }

# Splits a C-family source into (code, comments): strings and character literals go to neither.
sub split_source {
  my ($text) = @_;
  my ($code, $comments) = ('', '');
  while ($text =~ m{\G(//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|[^/"']+|.)}gs) {
    my $t = $1;
    if ($t =~ m{^//} || $t =~ m{^/\*}) { $comments .= "$t\n"; $code .= "\n" x ($t =~ tr/\n//); }
    elsif ($t =~ /^["']/) { $code .= '""'; }
    else { $code .= $t; }
  }
  return ($code, $comments);
}

my (%identifier, @texts);  # words of code; [file, text to check]
for my $f (@files) {
  next if $f =~ $skip;
  if ($f =~ $src_ext) {
    my ($code, $comments) = split_source(slurp($f));
    $identifier{$_} = 1 for $code =~ /\b([A-Za-z_]\w*)\b/g;
    push @texts, [$f, $comments];
  } elsif ($f =~ $hash_ext) {
    my $text = slurp($f);
    $identifier{$_} = 1 for $text =~ /\b([A-Za-z_]\w*)\b/g;  # CMake functions, script names
    push @texts, [$f, join "\n", $text =~ /(?:^|\s)#(?!include|!|pragma)([^\n]*)/g];
  } elsif ($f =~ /\.md$/) {
    push @texts, [$f, slurp($f)];
  }
}

sub expand_braces {  # "a/b.{h,cpp}" -> ("a/b.h", "a/b.cpp"), recursively
  my ($p) = @_;
  return ($p) unless $p =~ /^(.*?)\{([^{}]*)\}(.*)$/;
  my ($pre, $alts, $post) = ($1, $2, $3);
  return map { expand_braces("$pre$_$post") } split /,/, $alts, -1;
}

my $namespaces = qr/(?:reel|autograd|kernels|optim|nn|distributed|report|profile|untracked|simt)/;
my $tops = join '|', map { quotemeta } sort keys %top;
my @stale;
for my $entry (@texts) {
  my ($f, $text) = @$entry;
  my %said;
  # Repository paths: a top-level folder, then path characters. Not after a word character, '/',
  # '.', '-' or '$' (build/examples/x, ../shared, ${PROJECT_SOURCE_DIR}/x are not repository names).
  while ($text =~ m{(?<![\w/.\-\$~])((?:$tops)/[\w./{},<>*+\-]*)}g) {
    my $path = $1;
    $path =~ s/[.,]+$//;                        # the sentence's full stop or comma
    next if $path =~ /[<>*]|\.\.\.|\+/;         # a pattern, not a file
    for my $p (expand_braces($path)) {
      (my $bare = $p) =~ s{/$}{};
      next if $tracked{$bare} || $folder{$bare};
      next if grep { $tracked{"$bare$_"} } qw(.cpp .cu);  # a program, named after its source
      push @stale, "$f: names $p, which the tree does not have" unless $said{$p}++;
    }
  }
  # Bare source file names.
  while ($text =~ m{(?<![\w/.\-<\$])([A-Za-z_][\w\-]*\.(?:h|hpp|cpp|cu|cuh|sh|cmake|md|py))\b(?![\w/(])}g) {
    my $name = $1;
    next if $basename{$name} || $allowed{$name};
    push @stale, "$f: names the file $name, which the tree does not have" unless $said{$name}++;
  }
  # Functions named in passing, as name() or name(args): a snake_case name must be one the code has.
  while ($text =~ m{(?<![\w:.>\-])([a-z][a-z0-9]*_[a-z0-9_]*)\(}g) {
    my $name = $1;
    next if $identifier{$name};
    push @stale, "$f: names $name(), but no code defines or uses it" unless $said{"$name()"}++;
  }
  # Functions and types through a project namespace.
  while ($text =~ m{(?<![\w:])((?:$namespaces)(?:::\w+)+)}g) {
    my $name = $1;
    my $last = (split /::/, $name)[-1];
    next if $identifier{$last};
    push @stale, "$f: names $name, but no code defines or uses $last" unless $said{$name}++;
  }
}

if (@stale) {
  print STDERR "check_refs: $_\n" for @stale;
  printf STDERR "check_refs: %d stale name(s) in comments and docs\n", scalar @stale;
  exit 1;
}
printf "check_refs: every path, file and reel:: name in %d comments and docs exists\n", scalar @texts;
