package data

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// FolderOptions configures OpenFolder.
type FolderOptions struct {
	// Name names the dataset; empty means the base name of the path.
	Name string
	// Root is the folder holding the class folders, relative to the path
	// given to OpenFolder (for an archive, a member path such as "test").
	// Empty means it is inferred (ImageRoot), for a directory as for an
	// archive, so that a directory reads as the archive it was made from:
	// the deepest folder holding all images, one level above the images
	// if they are all in one folder. A directory whose folders are the
	// classes is its own root. With Files and no Root, a directory's root
	// is the directory itself (the listed files are checked, the tree is
	// not walked).
	Root string
	// Classes is the label space. Nil means the sorted class folder names
	// (as torchvision's ImageFolder). Otherwise each class folder must be
	// the name of a class, compared exactly or, failing that, ignoring case
	// and treating '_' and '-' as spaces; classes without a folder are
	// allowed (as ImageNet-A's 200 of 1000).
	Classes []string
	// FolderNames, if set, are the folder names of Classes, one per class
	// (e.g. ImageNet wnids); folders are then matched against them. With
	// Classes nil, the classes are named by FolderNames.
	FolderNames []string
	// Files restricts the dataset to these images, given relative to Root
	// as "<class folder>/<file>", in this order. Nil means every image.
	Files []string

	byPosition bool // Classes are the sorted folder names' classes, by position
}

// Folder is an image-folder dataset: Root/<class>/**/<image>, read from a
// directory, an uncompressed .tar, or a .tar.gz.
//
// Images are PNG, JPEG or GIF files (extensions .jpg, .jpeg, .png, .gif in
// any case); other files, and names starting with '.', are ignored. Without
// FolderOptions.Files, images are ordered as torchvision's ImageFolder
// orders them: by class folder name, then folder path, then file name.
//
// The tree is indexed once, when it is opened: a directory is walked
// (WalkImages), and an archive is indexed by ImageArchive (an uncompressed
// tar's member offsets are recorded, images then read with one ReadAt
// each, and a .tar.gz is decompressed once, keeping its images' encoded
// bytes in memory: fine for CIFAR-sized archives; extract larger ones,
// such as ImageNet, or keep them as .tar).
type Folder struct {
	name    string
	src     string // the directory or archive, for messages
	classes []string
	items   []folderItem

	root    string        // directory mode: the root directory
	prefix  string        // archive mode: the root's member path, with a final '/'
	archive *ImageArchive // archive mode
}

type folderItem struct {
	rel    string // relative to the root: "<class>/<...>/<file>"
	label  int
	member int // archive mode: the image's index in archive
}

// OpenFolder indexes the image folder at path: a directory, a .tar, or a
// .tar.gz / .tgz file (recognised by content, not name).
func OpenFolder(path string, opts FolderOptions) (*Folder, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("data: image folder: %w", err)
	}
	d := &Folder{name: opts.Name, src: path}
	if d.name == "" {
		d.name = filepath.Base(path)
	}
	var members []folderItem // rel relative to the archive until the root is known
	if st.IsDir() {
		members, err = d.walkDir(path, opts.Root, opts.Files)
	} else {
		members, err = d.indexArchive(path)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	var folders []string // every class folder, whether or not Files selects from it
	if st.IsDir() && opts.Files != nil {
		folders, err = ClassDirs(d.root)
	} else if !st.IsDir() {
		members, d.prefix, err = archiveRoot(path, members, opts.Root)
		folders = classFolders(members)
	} else {
		folders = classFolders(members)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	if !st.IsDir() {
		if opts.Files != nil {
			if members, err = selectFiles(path, members, opts.Files); err != nil {
				d.Close()
				return nil, err
			}
		}
	}
	if err := d.assignLabels(members, folders, &opts); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// isImageName reports whether a file name has an image extension and is
// not hidden.
func isImageName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".jpg", ".jpeg", ".png", ".gif":
		return true
	}
	return false
}

// walkDir sets the root of the directory path (path joined with root,
// or, when root and files are empty, the one ImageRoot infers from the
// images found) and lists the images of its class folders, or checks
// that the listed files exist.
func (d *Folder) walkDir(path, root string, files []string) ([]folderItem, error) {
	d.root = filepath.Join(path, filepath.FromSlash(root))
	d.src = d.root
	st, err := os.Stat(d.root)
	if err != nil {
		return nil, fmt.Errorf("data: image folder: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("data: image folder %s is not a directory", d.root)
	}
	if files != nil {
		items := make([]folderItem, len(files))
		for i, rel := range files {
			if _, err := os.Stat(filepath.Join(d.root, filepath.FromSlash(rel))); err != nil {
				return nil, fmt.Errorf("data: %s: listed image %d of %d: %w", d.root, i+1, len(files), err)
			}
			items[i] = folderItem{rel: rel}
		}
		return items, nil
	}
	items, direct, empty, err := classFolderImages(d.root)
	if err != nil {
		return nil, err
	}
	if root == "" && len(items) > 0 && !direct {
		// An image directly in path makes path the root (ImageRoot's
		// rule); else the deepest folder holding every image is.
		rels := make([]string, len(items))
		for i, it := range items {
			rels[i] = it.rel
		}
		if r := ImageRoot(rels); r != "" {
			d.root = filepath.Join(path, filepath.FromSlash(r))
			d.src = d.root
			if items, direct, empty, err = classFolderImages(d.root); err != nil {
				return nil, err
			}
		}
	}
	if empty != "" {
		// An empty class would silently drop a class; ImageFolder refuses too.
		return nil, fmt.Errorf("data: %s: class folder %q holds no images", d.root, empty)
	}
	if len(items) == 0 {
		if direct {
			return nil, fmt.Errorf("data: %s: no class folders under the root %s: its images lie directly in it, in no class (want <root>/<class>/<image>)", path, d.root)
		}
		return nil, fmt.Errorf("data: %s: no images (.jpg, .jpeg, .png, .gif) in class folders under the root %s", path, d.root)
	}
	return items, nil
}

// classFolderImages lists the images in the class folders of the folder
// root (its folders and links to folders, not hidden), as
// "<class>/<...>/<file>"; direct reports an image directly in root (in
// no class), and empty names the first class folder holding no image
// ("" if none).
func classFolderImages(root string) (items []folderItem, direct bool, empty string, err error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, false, "", fmt.Errorf("data: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if !isDirEntry(root, e) {
			direct = direct || isImageName(e.Name()) // a file or a link to one, as WalkImages lists them
			continue
		}
		// The trailing separator makes WalkImages enter a class folder
		// that is a link; below it, links are not followed (ImageFolder's
		// os.walk(followlinks=True) would).
		rels, err := WalkImages(filepath.Join(root, e.Name())+string(filepath.Separator), nil)
		if err != nil {
			return nil, false, "", fmt.Errorf("data: %w", err)
		}
		if len(rels) == 0 && empty == "" {
			empty = e.Name()
		}
		for _, rel := range rels {
			items = append(items, folderItem{rel: e.Name() + "/" + rel})
		}
	}
	return items, direct, empty, nil
}

// WalkImages lists the images in the folder dir and in its folders, as
// '/'-separated paths relative to dir, in filepath.WalkDir's order (each
// folder's entries by name): the files with an image name (.jpg, .jpeg,
// .png, .gif in any case, not starting with '.'), in folders that are
// not hidden (a name starting with '.'; dir itself may be). Links are not
// followed: a link to an image is listed, a link to a folder is not
// entered (give dir a final separator to enter dir itself when it is a
// link). Each other file, and each hidden folder, is passed to skip (if
// not nil) as dir joined with its path, folder true for a folder, so
// that the caller can say what it left out.
//
// It is the one walk of an image tree: OpenFolder lists each class
// folder with it, and subtta's --images a whole folder.
func WalkImages(dir string, skip func(path string, folder bool)) ([]string, error) {
	var rels []string
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if de.IsDir() {
			if strings.HasPrefix(de.Name(), ".") {
				if skip != nil {
					skip(p, true)
				}
				return filepath.SkipDir
			}
			return nil
		}
		if !isImageName(de.Name()) {
			if skip != nil {
				skip(p, false)
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rels = append(rels, filepath.ToSlash(rel))
		return nil
	})
	return rels, err
}

// isDirEntry reports whether e is a directory or a link to one.
func isDirEntry(dir string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		return err == nil && st.IsDir()
	}
	return false
}

// indexArchive indexes the archive at p (d.archive) and returns its
// images, their rel the member path.
func (d *Folder) indexArchive(p string) ([]folderItem, error) {
	a, err := OpenImageArchive(p, ArchiveOptions{})
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	d.archive = a
	items := make([]folderItem, a.Len())
	for i := range items {
		items[i] = folderItem{rel: a.Name(i), member: i}
	}
	return items, nil
}

// archiveRoot makes the members' paths relative to the root folder, drops
// members outside it, and checks every image is in a class folder.
func archiveRoot(p string, items []folderItem, root string) (_ []folderItem, prefix string, _ error) {
	if len(items) == 0 {
		return nil, "", fmt.Errorf("data: %s: archive holds no images", p)
	}
	root = strings.Trim(path.Clean("/"+root), "/")
	if root == "" && len(items) > 0 {
		rels := make([]string, len(items))
		for i, it := range items {
			rels[i] = it.rel
		}
		root = ImageRoot(rels)
	}
	prefix = root + "/"
	if root == "" {
		prefix = ""
	}
	out := items[:0]
	for _, it := range items {
		rel, ok := strings.CutPrefix(it.rel, prefix)
		if !ok {
			continue
		}
		if !strings.Contains(rel, "/") {
			continue // directly in the root: not in a class, as ImageFolder
		}
		it.rel = rel
		out = append(out, it)
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("data: %s: no images in class folders under %q", p, root)
	}
	return out, prefix, nil
}

// ImageRoot returns the folder whose folders are the classes of the
// images at the '/'-separated relative paths rels (the files of a
// folder, or the members of an archive): the deepest folder holding
// every image, or its parent when every image lies directly in it (that
// folder is then their one class); "" for the top. rels must not be
// empty. (Absolute paths stop at "/".)
//
// It is the one rule for finding the class folders in a tree that wraps
// them, such as an archive's test/: OpenFolder takes it as an archive's
// root when none is given, and subtta's --images labels a folder's and
// an archive's images by it.
func ImageRoot(rels []string) string {
	common := path.Dir(rels[0])
	for _, r := range rels[1:] {
		d := path.Dir(r)
		for common != "." && common != "/" && d != common && !strings.HasPrefix(d, common+"/") {
			common = path.Dir(common)
		}
	}
	allDirect := true
	for _, r := range rels {
		if path.Dir(r) != common {
			allDirect = false
			break
		}
	}
	if allDirect && common != "." {
		common = path.Dir(common)
	}
	if common == "." {
		return ""
	}
	return common
}

// selectFiles keeps the listed members, in the list's order.
func selectFiles(p string, items []folderItem, files []string) ([]folderItem, error) {
	byRel := make(map[string]int, len(items))
	for i, it := range items {
		byRel[it.rel] = i
	}
	out := make([]folderItem, len(files))
	for i, f := range files {
		j, ok := byRel[path.Clean(f)]
		if !ok {
			return nil, fmt.Errorf("data: %s: listed image %d of %d, %q, is not in the archive", p, i+1, len(files), f)
		}
		out[i] = items[j]
	}
	return out, nil
}

// assignLabels sets the classes and each item's label.
func (d *Folder) assignLabels(items []folderItem, folders []string, o *FolderOptions) error {
	slices.Sort(folders)

	index := map[string]int{} // folder → label
	switch {
	case o.FolderNames != nil:
		d.classes = o.Classes
		if d.classes == nil {
			d.classes = o.FolderNames
		}
		if len(o.FolderNames) != len(d.classes) {
			return fmt.Errorf("data: %s: %d folder names for %d classes", d.src, len(o.FolderNames), len(d.classes))
		}
		for i, f := range o.FolderNames {
			if _, dup := index[f]; dup {
				return fmt.Errorf("data: %s: folder name %q is given twice", d.src, f)
			}
			index[f] = i
		}
	case o.Classes == nil:
		d.classes = folders
		for i, f := range folders {
			index[f] = i
		}
	case o.byPosition:
		if len(folders) != len(o.Classes) {
			return fmt.Errorf("data: %s: %d class folders for %d classes; give the folder names (for ImageNet, a wnid list) to map them", d.src, len(folders), len(o.Classes))
		}
		d.classes = o.Classes
		for i, f := range folders {
			index[f] = i
		}
	default:
		d.classes = o.Classes
		exact, loose := map[string]int{}, map[string]int{}
		for i, c := range o.Classes {
			exact[c] = i
			loose[looseName(c)] = i
		}
		for _, f := range folders {
			i, ok := exact[f]
			if !ok {
				i, ok = loose[looseName(f)]
			}
			if !ok {
				return fmt.Errorf("data: %s: class folder %q is not one of the %d classes (%s …)", d.src, f, len(o.Classes), strings.Join(o.Classes[:min(5, len(o.Classes))], ", "))
			}
			index[f] = i
		}
	}
	for k := range items {
		c, _, _ := strings.Cut(items[k].rel, "/")
		l, ok := index[c]
		if !ok {
			return fmt.Errorf("data: %s: class folder %q is not among the %d folder names", d.src, c, len(index))
		}
		items[k].label = l
	}
	if o.Files == nil {
		// torchvision's order: class folder name, then sorted(os.walk)'s
		// folder order, then file name.
		slices.SortFunc(items, func(a, b folderItem) int {
			ca, _, _ := strings.Cut(a.rel, "/")
			cb, _, _ := strings.Cut(b.rel, "/")
			return cmp.Or(strings.Compare(ca, cb), strings.Compare(path.Dir(a.rel), path.Dir(b.rel)), strings.Compare(path.Base(a.rel), path.Base(b.rel)))
		})
	}
	if len(items) == 0 {
		return fmt.Errorf("data: %s: no images", d.src)
	}
	d.items = items
	return nil
}

// classFolders returns the distinct class folders of items.
func classFolders(items []folderItem) []string {
	var folders []string
	seen := map[string]bool{}
	for _, it := range items {
		c, _, _ := strings.Cut(it.rel, "/")
		if !seen[c] {
			seen[c] = true
			folders = append(folders, c)
		}
	}
	return folders
}

// ClassDirs returns the class folders of the image folder root as
// OpenFolder reads them, sorted by name: its directories and links to
// directories, except hidden ones (a name starting with ".").
func ClassDirs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	var out []string
	for _, e := range entries {
		if isDirEntry(root, e) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// looseName folds case and treats '_' and '-' as spaces, so that folder
// "aquarium_fish" matches class "aquarium fish".
func looseName(s string) string {
	return strings.ToLower(strings.NewReplacer("_", " ", "-", " ").Replace(s))
}

// Name returns the dataset's name.
func (d *Folder) Name() string { return d.name }

// Len returns the number of images.
func (d *Folder) Len() int { return len(d.items) }

// Classes returns the class names.
func (d *Folder) Classes() []string { return d.classes }

// Label returns the label of image i.
func (d *Folder) Label(i int) int { return d.items[i].label }

// File returns the path of image i relative to the root, e.g.
// "cat/0001.jpg".
func (d *Folder) File(i int) string { return d.items[i].rel }

// Path returns where image i is read from, for messages: the file's path
// (the root, which OpenFolder may have inferred below the path it was
// given, joined with File(i)), or ARCHIVE:MEMBER for an archive. Item's
// errors name the image so.
func (d *Folder) Path(i int) string {
	if d.archive == nil {
		return filepath.Join(d.root, filepath.FromSlash(d.items[i].rel))
	}
	return d.src + ":" + d.prefix + d.items[i].rel
}

// Item reads and decodes image i.
func (d *Folder) Item(i int) (*RGB, int, error) {
	if err := checkIndex(d.src, i, len(d.items)); err != nil {
		return nil, 0, err
	}
	b, name, err := d.encoded(i)
	if err != nil {
		return nil, 0, err
	}
	m, err := DecodeRGB(name, b)
	if err != nil {
		return nil, 0, err
	}
	return m, d.items[i].label, nil
}

// encoded returns the file bytes of image i and a name for messages.
func (d *Folder) encoded(i int) ([]byte, string, error) {
	name := d.Path(i)
	if d.archive == nil {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, "", fmt.Errorf("data: %w", err)
		}
		return b, name, nil
	}
	b, err := d.archive.Read(d.items[i].member)
	if err != nil {
		return nil, "", fmt.Errorf("data: %s: %w", name, err)
	}
	return b, name, nil
}

// Close closes an uncompressed archive and drops the in-memory one.
func (d *Folder) Close() error {
	if d.archive != nil {
		return d.archive.Close()
	}
	return nil
}
